"""Link shaping: what a link does to packets, and the tc commands that make it so.

Everything here is pure: `LinkShape` is a frozen value, and the functions return tc
argument lists (never run them).  `testbed.net.network` runs them through the runner.

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

from testbed.core.batch import batch_text  # noqa: F401  (re-exported)
from testbed.spec.linkshape import (  # noqa: F401  (the value and its numbers, re-exported)
    BURST_MIN_BYTES,
    BURST_TIME_S,
    DEFAULT_QUEUE_PKTS,
    DISTRIBUTIONS,
    MTU_BYTES,
    NETEM_MIN_LIMIT,
    NO_REORDER_RATE_BPS,
    UNLIMITED_BPS,
    GilbertElliott,
    LinkShape,
    ShapeError,
    burst_for,
    effective_rate,
    mininet_params,
    netem_limit,
    shape_from_mininet_params,
    tc_time,
)


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
