"""Traffic patterns: pure functions that return lists of `FlowSpec` (host names only).

Addresses are filled in later by `testbed.plan.flows.resolve_flows`, ports by
`testbed.host.traffic.flows.assign_ports`.

* `one_to_one`  -- ``parallel`` flows src -> dst (bulk; ``via`` pins them to a path)
* `incast`      -- ``senders[i] -> receiver`` (P1 static: S0..S4 -> S15)
* `random_pairs` -- ``count`` flows between uniformly drawn distinct hosts (P1 random)
* `permutation` -- every host sends one flow to another host (a random derangement)
* `cbr`         -- one UDP constant-bit-rate flow (P4 cross traffic)

Flow i of a pattern starts at ``start + i * interval``; flow ids are
``<workload>-<i>``.  Random choices come from ``random.Random(seed)`` only, so the
same seed gives the same flows on every machine.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from testbed.core.errors import InputError
from testbed.plan.flowspec import FlowSpec


def _ids(workload: str, n: int) -> list[str]:
    return [f"{workload}-{i}" for i in range(n)]


def one_to_one(workload: str, src: str, dst: str, *, protocol: str = "tcp",
               size: int | None = None, duration: float | None = None, start: float = 0.0,
               parallel: int = 1, via: str | None = None, cc: str | None = None
               ) -> list[FlowSpec]:
    """``parallel`` flows from src to dst, all starting at start.

    size/duration: bound (neither: until the run ends); via: path name to pin to
    (TCP only: an MPTCP connection uses every path anyway).
    """
    if via is not None and protocol == "mptcp":
        raise InputError(f"workload {workload!r}: 'via' pins a TCP flow to one path; "
                         "it cannot be used with protocol 'mptcp'")
    flows = [FlowSpec(fid, workload, src, dst, protocol=protocol, size_bytes=size,
                      duration_s=duration, start_s=start, via=via, cc=cc)
             for fid in _ids(workload, parallel)]
    for f in flows:
        f.check()
    return flows


def incast(workload: str, senders: Sequence[str], receiver: str, size: int, *,
           count: int | None = None, start: float = 0.0, interval: float = 0.0,
           protocol: str = "tcp", cc: str | None = None) -> list[FlowSpec]:
    """One flow from each of the first ``count`` senders to receiver."""
    chosen = list(senders)[: len(senders) if count is None else count]
    if receiver in chosen:
        raise InputError(f"workload {workload!r}: the receiver {receiver!r} is also a sender")
    flows = [FlowSpec(fid, workload, s, receiver, protocol=protocol, size_bytes=size,
                      start_s=start + i * interval, cc=cc)
             for i, (fid, s) in enumerate(zip(_ids(workload, len(chosen)), chosen,
                                              strict=True))]
    for f in flows:
        f.check()
    return flows


def random_pairs(workload: str, hosts: Sequence[str], count: int, size: int, seed: int, *,
                 start: float = 0.0, interval: float = 0.0, protocol: str = "tcp",
                 cc: str | None = None) -> list[FlowSpec]:
    """``count`` flows, each between a uniformly drawn pair of distinct hosts."""
    if len(hosts) < 2:
        raise InputError(f"workload {workload!r}: random pairs need at least 2 hosts")
    rng = random.Random(seed)
    flows = []
    for i, fid in enumerate(_ids(workload, count)):
        src, dst = rng.sample(list(hosts), 2)
        flows.append(FlowSpec(fid, workload, src, dst, protocol=protocol, size_bytes=size,
                              start_s=start + i * interval, cc=cc))
    return flows


def derangement(hosts: Sequence[str], rng: random.Random) -> list[str]:
    """A random permutation of hosts in which no host maps to itself."""
    if len(hosts) < 2:
        raise InputError("a permutation pattern needs at least 2 hosts")
    while True:
        perm = list(hosts)
        rng.shuffle(perm)
        if all(a != b for a, b in zip(hosts, perm, strict=True)):
            return perm


def permutation(workload: str, hosts: Sequence[str], size: int, seed: int, *,
                start: float = 0.0, interval: float = 0.0, protocol: str = "tcp",
                cc: str | None = None) -> list[FlowSpec]:
    """Every host sends one flow to a distinct other host (a random derangement)."""
    dsts = derangement(hosts, random.Random(seed))
    return [FlowSpec(fid, workload, s, d, protocol=protocol, size_bytes=size,
                     start_s=start + i * interval, cc=cc)
            for i, (fid, s, d) in enumerate(zip(_ids(workload, len(hosts)), hosts, dsts,
                                                strict=True))]


def cbr(workload: str, src: str, dst: str, rate_bps: int, *, packet_size: int = 1000,
        duration: float | None = None, start: float = 0.0, via: str | None = None
        ) -> list[FlowSpec]:
    """One UDP flow at rate_bps (payload bits) with packet_size-byte payloads."""
    flow = FlowSpec(f"{workload}-0", workload, src, dst, protocol="udp",
                    duration_s=duration, start_s=start, via=via, rate_bps=rate_bps,
                    packet_size=packet_size)
    flow.check()
    return [flow]
