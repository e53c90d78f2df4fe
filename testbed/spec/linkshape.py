"""A link shape: what one direction of a link does to packets, as a frozen value.

`LinkShape` holds numbers in base units (bit/s, seconds, percent, packets, bytes): the
spec builds it from its validated paths (`testbed.spec.model.PathSpec.shape`), a
schedule event changes it (`ScheduleEvent.apply_to`), and `testbed.net.shaping` turns
it into tc commands.  `shape_from_mininet_params` reads the TCLink-style options of a
Mininet topology (a custom one written for Mininet), and `mininet_params` writes them,
so that ``mn --link tc`` shapes our topologies alike.  Semantics: docs/shaping.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from testbed.core.errors import InputError
from testbed.core.units import parse_duration

MTU_BYTES = 1514  # Ethernet frame as the qdisc sees it (1500 + 14)
UNLIMITED_BPS = 10_000_000_000
NO_REORDER_RATE_BPS = 10_000_000_000
NETEM_MIN_LIMIT = 1000
DEFAULT_QUEUE_PKTS = 1000
BURST_MIN_BYTES = MTU_BYTES  # one frame: a slow link never sends two faster than its rate
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
    """The tbf bucket in bytes: explicit, else `BURST_TIME_S` at the rate, >= 1 MTU."""
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
