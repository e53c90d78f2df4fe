"""Link shaping: what a link does to packets, and the tc commands that make it so.

Everything here is pure: `LinkShape` is a frozen value, and the functions return tc
argument lists (never run them).  `testbed.network` runs them through the runner.

Semantics (also in docs/shaping.md):

* **Per direction.**  A shape applies to the *egress* of one interface, i.e. to one
  direction of a link.  A link shaped "both ways" has the same shape on the egress of
  each of its two ends, so its **RTT is the sum of the one-way delays** (2 x delay for a
  symmetric link) and random loss applies independently in each direction (a ping
  round trip over a link with loss p per direction is lost with 1 - (1 - p)^2).
* **The qdisc tree**, built once per shaped interface and afterwards only *changed*
  (``tc qdisc change``), never re-created::

      netem  1:   root      delay, jitter, loss (random or Gilbert-Elliott), limit L
       `- tbf 2:  parent 1:1  rate, burst            -- the rate limiter
           `- pfifo 3: parent 2:1  limit Q           -- the bottleneck queue, in packets

  A packet first spends its one-way delay in netem's delay line, then waits in the
  rate limiter's FIFO of **Q packets** (`LinkShape.queue_pkts`), which is the only place
  where congestion drops happen.  A constant delay commutes with a FIFO server, so this
  is equivalent to "queue, then propagate" on a real link.
* **netem's limit L is sized so that delay alone never drops**:
  ``L = max(1000, 2 x ceil(rate x (delay + jitter) / (8 x MTU)) + Q)`` -- the packets
  in flight on the delay line at full rate, with headroom of 2 for bursts above rate.
* **Jitter** is uniform in ``delay +- jitter`` (or ``jitter_distribution``).  netem
  reorders packets whose delays cross; ``jitter_reorder=False`` keeps packet order by
  switching on netem's own rate (at `NO_REORDER_RATE_BPS`, far above any link rate):
  netem then never sends a packet before the one ahead of it, so a packet's delay is
  ``max(its own draw, the previous packet's)``.
* **Loss** is random (``loss_pct``) or Gilbert-Elliott (`GilbertElliott`, netem's
  ``gemodel``).  Every command states the full netem configuration, so a change that
  sets loss to 0 really resets it (Mininet issue 881).
* **No rate** (``bw_bps=None``) still builds the tbf at `UNLIMITED_BPS` so that a later
  schedule event can set a rate with ``tc qdisc change``.
* The tbf's ``limit`` is written as Q: the kernel passes a tbf's limit on to its
  *fifo child on every change (``fifo_set_limit``), so this keeps the pfifo at Q packets
  (tbf itself does not use the value).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from testbed.commands import batch_text  # noqa: F401  (re-exported)
from testbed.errors import InputError
from testbed.units import parse_duration, parse_percent, parse_rate

MTU_BYTES = 1514  # Ethernet frame as the qdisc sees it (1500 + 14)
UNLIMITED_BPS = 10_000_000_000
NO_REORDER_RATE_BPS = 10_000_000_000
NETEM_MIN_LIMIT = 1000
DEFAULT_QUEUE_PKTS = 1000
BURST_MIN_BYTES = 2 * MTU_BYTES
BURST_TIME_S = 0.010  # tokens for this long at the link rate: covers coarse timers (VMs)
DISTRIBUTIONS = ("normal", "pareto", "paretonormal")


class ShapeError(InputError):
    """A link shape with an impossible value (negative delay, loss above 100 %, ...)."""


@dataclass(frozen=True)
class GilbertElliott:
    """Gilbert-Elliott loss (netem ``loss gemodel p r 1-h 1-k``), all in percent.

    p_pct: chance to move good -> bad per packet; r_pct: chance to move bad -> good;
    bad_loss_pct: loss in the bad state (1-h, default 100); good_loss_pct: loss in the
    good state (1-k, default 0).
    """

    p_pct: float
    r_pct: float
    bad_loss_pct: float = 100.0
    good_loss_pct: float = 0.0

    def __post_init__(self) -> None:
        for name in ("p_pct", "r_pct", "bad_loss_pct", "good_loss_pct"):
            v = getattr(self, name)
            if not 0 <= v <= 100:
                raise ShapeError(f"Gilbert-Elliott {name}={v!r} must be between 0 and 100")

    def mean_loss_pct(self) -> float:
        """The long-run loss rate in percent."""
        if self.p_pct + self.r_pct == 0:
            return self.good_loss_pct
        bad = self.p_pct / (self.p_pct + self.r_pct)
        return bad * self.bad_loss_pct + (1 - bad) * self.good_loss_pct


@dataclass(frozen=True)
class LinkShape:
    """What one direction of a link does to packets.

    bw_bps: rate limit in bit/s (None: unlimited); delay_s: one-way delay; jitter_s:
    delay variation (+-); jitter_reorder: let jitter reorder packets (netem's default);
    jitter_distribution: None (uniform) or normal | pareto | paretonormal;
    loss_pct: random loss in percent; loss_model: Gilbert-Elliott loss instead of
    random loss; queue_pkts: bottleneck queue in packets; burst_bytes: tbf bucket
    (None: automatic, see `burst_for`).
    """

    bw_bps: int | None = None
    delay_s: float = 0.0
    jitter_s: float = 0.0
    jitter_reorder: bool = True
    jitter_distribution: str | None = None
    loss_pct: float = 0.0
    loss_model: GilbertElliott | None = None
    queue_pkts: int = DEFAULT_QUEUE_PKTS
    burst_bytes: int | None = field(default=None)

    def __post_init__(self) -> None:
        if self.bw_bps is not None and not (1000 <= self.bw_bps <= UNLIMITED_BPS):
            raise ShapeError(f"bw={self.bw_bps!r} bit/s is out of range; use 1kbit .. 10Gbit")
        for name in ("delay_s", "jitter_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and 0 <= v <= 10):
                raise ShapeError(f"{name[:-2]}={v!r}s is out of range; use 0 .. 10s")
        if not 0 <= self.loss_pct <= 100:
            raise ShapeError(f"loss={self.loss_pct!r}% is out of range; use 0% .. 100%")
        if self.loss_model is not None and self.loss_pct:
            raise ShapeError("give either loss (random) or a Gilbert-Elliott model, not both")
        if not (isinstance(self.queue_pkts, int) and 1 <= self.queue_pkts <= 1_000_000):
            raise ShapeError(f"queue={self.queue_pkts!r} must be a packet count >= 1")
        if self.jitter_distribution not in (None, *DISTRIBUTIONS):
            raise ShapeError(f"jitter distribution {self.jitter_distribution!r} is unknown; "
                             f"use one of {', '.join(DISTRIBUTIONS)}")
        if self.burst_bytes is not None and self.burst_bytes < MTU_BYTES:
            raise ShapeError(f"burst={self.burst_bytes!r} bytes is below one MTU "
                             f"({MTU_BYTES} bytes)")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "link") -> LinkShape:
        """Build a shape from spec-style values with units.

        data: keys bw ("10Mbit"), delay ("10ms"), jitter, loss ("1%"), queue (packets),
        reorder (bool), distribution, ge ({p, r, bad_loss, good_loss} percentages),
        burst (bytes); where: names the place in the spec for error messages.
        """
        known = {"bw", "delay", "jitter", "loss", "queue", "reorder", "distribution", "ge",
                 "burst"}
        extra = sorted(set(data) - known)
        if extra:
            raise ShapeError(f"{where}: unknown key(s) {', '.join(extra)}; "
                             f"expected {', '.join(sorted(known))}")
        kw: dict[str, Any] = {}
        parsers = (("bw", "bw_bps", parse_rate), ("delay", "delay_s", parse_duration),
                   ("jitter", "jitter_s", parse_duration), ("loss", "loss_pct", parse_percent))
        for key, attr, parse in parsers:
            if data.get(key) is not None:
                try:
                    kw[attr] = parse(data[key])
                except InputError as exc:
                    raise ShapeError(f"{where}.{key}: {exc}") from None
        if "ge" in data:
            ge = data["ge"]
            try:
                kw["loss_model"] = GilbertElliott(
                    parse_percent(ge["p"]), parse_percent(ge["r"]),
                    parse_percent(ge.get("bad_loss", "100%")),
                    parse_percent(ge.get("good_loss", "0%")))
            except InputError as exc:
                raise ShapeError(f"{where}.ge: {exc}") from None
            except (KeyError, TypeError, AttributeError):
                raise ShapeError(f"{where}.ge: expected a table with p and r, e.g. "
                                 "{p = \"1%\", r = \"30%\"}") from None
        if "queue" in data:
            kw["queue_pkts"] = data["queue"]
        if "reorder" in data:
            kw["jitter_reorder"] = bool(data["reorder"])
        if "distribution" in data:
            kw["jitter_distribution"] = data["distribution"]
        if "burst" in data:
            kw["burst_bytes"] = data["burst"]
        try:
            return cls(**kw)
        except ShapeError as exc:
            raise ShapeError(f"{where}: {exc}") from None

    def changed(self, **changes: Any) -> LinkShape:
        """A copy with some fields replaced (validated again)."""
        return replace(self, **changes)

    def rtt_s(self) -> float:
        """The round-trip time this shape gives when it is applied in both directions."""
        return 2 * self.delay_s


# -- numbers derived from a shape -------------------------------------------------------

def effective_rate(shape: LinkShape) -> int:
    """The tbf rate in bit/s (`UNLIMITED_BPS` when the shape has no rate)."""
    return shape.bw_bps if shape.bw_bps is not None else UNLIMITED_BPS


def burst_for(shape: LinkShape) -> int:
    """The tbf bucket in bytes: explicit, else `BURST_TIME_S` at the rate, >= 2 MTU."""
    if shape.burst_bytes is not None:
        return shape.burst_bytes
    return max(BURST_MIN_BYTES, math.ceil(effective_rate(shape) * BURST_TIME_S / 8))


def netem_limit(shape: LinkShape) -> int:
    """netem's packet limit: twice the packets on the delay line at full rate, plus Q.

    With no rate the delay line is sized for 1 Gbit/s.
    """
    rate = shape.bw_bps if shape.bw_bps is not None else 1_000_000_000
    in_flight = math.ceil(rate * (shape.delay_s + shape.jitter_s) / (8 * MTU_BYTES))
    return max(NETEM_MIN_LIMIT, 2 * in_flight + shape.queue_pkts)


# -- formatting for tc -----------------------------------------------------------------

def tc_time(seconds: float) -> str:
    """A duration for tc, in whole microseconds (``"10000us"``)."""
    return f"{round(seconds * 1e6)}us"


def tc_rate(bps: int) -> str:
    """A rate for tc in bit/s (``"10000000bit"``)."""
    return f"{int(bps)}bit"


def tc_percent(pct: float) -> str:
    """A percentage for tc (``"0.5%"``)."""
    return f"{pct:.6g}%"


# -- argument lists --------------------------------------------------------------------

def netem_params(shape: LinkShape) -> list[str]:
    """The full netem parameter list for a shape (after the word ``netem``)."""
    args = ["delay", tc_time(shape.delay_s)]
    if shape.jitter_s > 0:
        args.append(tc_time(shape.jitter_s))
        if shape.jitter_distribution:
            args += ["distribution", shape.jitter_distribution]
    if shape.loss_model is not None:
        ge = shape.loss_model
        args += ["loss", "gemodel", tc_percent(ge.p_pct), tc_percent(ge.r_pct),
                 tc_percent(ge.bad_loss_pct), tc_percent(ge.good_loss_pct)]
    elif shape.loss_pct > 0:
        args += ["loss", "random", tc_percent(shape.loss_pct)]
    if shape.jitter_s > 0 and not shape.jitter_reorder:
        args += ["rate", tc_rate(NO_REORDER_RATE_BPS)]
    args += ["limit", str(netem_limit(shape))]
    return args


def tbf_params(shape: LinkShape) -> list[str]:
    """The tbf parameter list (after the word ``tbf``); limit carries Q, see module doc."""
    return ["rate", tc_rate(effective_rate(shape)), "burst", str(burst_for(shape)),
            "limit", str(shape.queue_pkts)]


def _tc(verb: str, dev: str, where: list[str], kind: str, params: list[str]) -> list[str]:
    return ["tc", "qdisc", verb, "dev", dev, *where, kind, *params]


def netem_cmd(verb: str, dev: str, shape: LinkShape) -> list[str]:
    """``tc qdisc <verb>`` for the root netem 1: of dev."""
    return _tc(verb, dev, ["root", "handle", "1:"], "netem", netem_params(shape))


def tbf_cmd(verb: str, dev: str, shape: LinkShape) -> list[str]:
    """``tc qdisc <verb>`` for the tbf 2: under netem."""
    return _tc(verb, dev, ["parent", "1:1", "handle", "2:"], "tbf", tbf_params(shape))


def pfifo_cmd(verb: str, dev: str, shape: LinkShape) -> list[str]:
    """``tc qdisc <verb>`` for the pfifo 3: under tbf (the bottleneck queue)."""
    return _tc(verb, dev, ["parent", "2:1", "handle", "3:"], "pfifo",
               ["limit", str(shape.queue_pkts)])


def setup_commands(dev: str, shape: LinkShape) -> list[list[str]]:
    """The commands that build the qdisc tree on dev (run once, on a fresh interface)."""
    return [netem_cmd("add", dev, shape), tbf_cmd("add", dev, shape),
            pfifo_cmd("add", dev, shape)]


def change_commands(dev: str, old: LinkShape, new: LinkShape) -> list[list[str]]:
    """The ``tc qdisc change`` commands that turn old into new on dev (none if equal).

    Only the qdiscs whose parameters differ are touched; nothing is re-created.
    """
    cmds: list[list[str]] = []
    if netem_params(old) != netem_params(new):
        cmds.append(netem_cmd("change", dev, new))
    if tbf_params(old) != tbf_params(new):
        cmds.append(tbf_cmd("change", dev, new))
    return cmds


def teardown_command(dev: str) -> list[str]:
    """Remove the whole tree from dev (back to the interface's default qdisc)."""
    return ["tc", "qdisc", "del", "dev", dev, "root"]


def link_state_command(dev: str, up: bool) -> list[str]:
    """``ip link set dev <dev> up|down``."""
    return ["ip", "link", "set", "dev", dev, "up" if up else "down"]


def offload_command(dev: str, on: bool = False) -> list[str]:
    """``ethtool -K`` turning segmentation/receive offloads off (or on) for dev.

    With offloads off every skb is one packet, so netem loss, queue limits in packets
    and captures all count real packets.
    """
    v = "on" if on else "off"
    return ["ethtool", "-K", dev, "tso", v, "gso", v, "gro", v]


def shape_from_mininet_params(opts: Mapping[str, Any]) -> LinkShape | None:
    """A shape from Mininet TCLink-style link options, or None if there are none.

    opts: bw (Mbit/s, number), delay / jitter ("10ms"), loss (percent, number),
    max_queue_size (packets).  An explicit ``shape`` (a `LinkShape`) wins.
    """
    shape = opts.get("shape")
    if isinstance(shape, LinkShape):
        return shape
    keys = ("bw", "delay", "jitter", "loss", "max_queue_size")
    if not any(opts.get(k) not in (None, 0, "") for k in keys):
        return None
    kw: dict[str, Any] = {}
    if opts.get("bw"):
        kw["bw_bps"] = round(float(opts["bw"]) * 1e6)
    if opts.get("delay"):
        kw["delay_s"] = parse_duration(str(opts["delay"]))
    if opts.get("jitter"):
        kw["jitter_s"] = parse_duration(str(opts["jitter"]))
    if opts.get("loss"):
        kw["loss_pct"] = float(opts["loss"])
    if opts.get("max_queue_size"):
        kw["queue_pkts"] = int(opts["max_queue_size"])
    return LinkShape(**kw)


def mininet_params(shape: LinkShape) -> dict[str, Any]:
    """TCLink-style options for shape, so ``mn --link tc`` shapes a topology similarly."""
    out: dict[str, Any] = {"delay": tc_time(shape.delay_s), "max_queue_size": shape.queue_pkts}
    if shape.bw_bps is not None:
        out["bw"] = shape.bw_bps / 1e6
    if shape.jitter_s:
        out["jitter"] = tc_time(shape.jitter_s)
    if shape.loss_pct:
        out["loss"] = shape.loss_pct
    return out
