"""The run's pings: one `PingTarget` per ping workload, addresses filled in.

A ping pinned ``via`` a path goes to the destination's address on that path (or its
primary one) from the source's address there.  `off_path_switches` says which switches
a ping's configured round trip leaves out (the fidelity verdict compares the measured
RTT with the configured one, `testbed.run.fidelity_data`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from testbed.core.errors import SpecError
from testbed.spec.experiment import Experiment
from testbed.spec.model import MultipathTopology, PingWorkload

if TYPE_CHECKING:
    from mininet.topo import Topo


@dataclass(frozen=True)
class PingTarget:
    """One ping workload as `testbed.host.traffic.ping.PingRun` runs it.

    start: offset from the run's time origin (s); host: where ping runs (the source);
    dst_addr: the address pinged; name: the workload's name; src/dst: host names;
    path: the path it is pinned to (or None); interval (s), count, duration (s), size
    (payload bytes): as in the spec; bind: the source address (pinned pings).
    """

    start: float
    host: str
    dst_addr: str
    name: str
    src: str
    dst: str
    path: str | None
    interval: float
    count: int | None
    duration: float | None
    size: int
    bind: str | None


def ping_targets(exp: Experiment, addr_of: dict[str, str],
                 via_addr: dict[tuple[str, str], str]) -> list[PingTarget]:
    """One `PingTarget` per ping workload, in the spec's order."""
    out = []
    for i, wl in enumerate(exp.workload):
        if not isinstance(wl, PingWorkload):
            continue
        dst = addr_of.get(wl.dst)
        bind = None
        if wl.via is not None:
            dst = via_addr.get((wl.dst, wl.via)) or dst
            bind = via_addr.get((wl.src, wl.via))
        if dst is None:
            raise SpecError(f"workload[{i}].dst: host {wl.dst!r} has no address")
        out.append(PingTarget(start=wl.start, host=wl.src, dst_addr=dst,
                              name=exp.workload_name(i), src=wl.src, dst=wl.dst,
                              path=wl.via, interval=wl.interval, count=wl.count,
                              duration=wl.duration, size=wl.size, bind=bind))
    return out


def off_path_switches(exp: Experiment, topo: Topo, path: str | None) -> frozenset[str]:
    """The switches a ping's packets never cross: on a multipath topology, the other
    paths' (an unpinned ping takes path 0, the main routing table's); none elsewhere.

    exp: the spec; topo: its topology; path: the ping's path (None: not pinned).
    """
    from topologies.multipath import MultiHomedTopo

    if not isinstance(exp.topology, MultipathTopology):
        return frozenset()
    assert isinstance(topo, MultiHomedTopo)
    switch_of = {pa.name: pa.switch for pa in topo.plan}
    if path is None:
        return frozenset(list(switch_of.values())[1:])
    if path in switch_of:
        return frozenset(sw for name, sw in switch_of.items() if name != path)
    return frozenset()
