"""The run's flows: every bulk, flows and cbr workload as `FlowSpec` s, addresses filled in.

`plan_flows` turns the workloads into flows between host names (random patterns draw
from seeds derived from the run's, `testbed.spec.sweep.workload_seed`);
`resolve_addresses` gives each flow the addresses it connects to and binds to.  Ports are
the flow runner's business (`testbed.host.traffic.flows.assign_ports`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from testbed.core.errors import InputError
from testbed.plan import patterns as pt
from testbed.plan.flowspec import FlowSpec
from testbed.spec.experiment import Experiment
from testbed.spec.model import BulkWorkload, CbrWorkload, FlowsWorkload
from testbed.spec.sweep import workload_seed


def plan_flows(exp: Experiment, run_seed: int, hosts: list[str]) -> list[FlowSpec]:
    """Every flow of the run (bulk, flows, cbr) as `FlowSpec` s with host names only.

    exp: the spec; run_seed: the repetition's seed (random patterns derive theirs from
    it); hosts: the host pool for patterns without an explicit one.
    """
    flows: list[FlowSpec] = []
    for i, wl in enumerate(exp.workload):
        name = exp.workload_name(i)
        if isinstance(wl, BulkWorkload):
            flows += pt.one_to_one(name, wl.src, wl.dst,
                                   protocol=wl.protocol or exp.transport.protocol,
                                   size=wl.size, duration=wl.duration, start=wl.start,
                                   parallel=wl.parallel, via=wl.via, cc=wl.cc)
        elif isinstance(wl, FlowsWorkload):
            proto = wl.protocol or exp.transport.protocol
            seed = wl.seed if wl.seed is not None else workload_seed(run_seed, i)
            pool = wl.hosts or hosts
            if wl.pattern == "incast":
                assert wl.src is not None and wl.dst is not None
                flows += pt.incast(name, wl.src, wl.dst, wl.size, count=wl.count,
                                   start=wl.start, interval=wl.interval, protocol=proto,
                                   cc=wl.cc)
            elif wl.pattern == "random":
                flows += pt.random_pairs(name, pool, wl.count or 0, wl.size, seed,
                                         start=wl.start, interval=wl.interval,
                                         protocol=proto, cc=wl.cc)
            else:
                flows += pt.permutation(name, pool, wl.size, seed, start=wl.start,
                                        interval=wl.interval, protocol=proto, cc=wl.cc)
        elif isinstance(wl, CbrWorkload):
            flows += pt.cbr(name, wl.src, wl.dst, wl.rate, packet_size=wl.packet_size,
                            duration=wl.duration, start=wl.start, via=wl.via)
    return flows


def workload_seeds(exp: Experiment, run_seed: int) -> dict[str, int]:
    """The seed each ``flows`` workload's pattern draws from (for ``metadata.json``)."""
    return {exp.workload_name(i): workload_seed(run_seed, i)
            for i, wl in enumerate(exp.workload) if isinstance(wl, FlowsWorkload)}


def resolve_flows(flows: Sequence[FlowSpec], addr_of: Mapping[str, str],
                  via_addr: Mapping[tuple[str, str], str] | None = None) -> list[FlowSpec]:
    """Fill in each flow's destination address and (for ``via``) its source address.

    addr_of: host -> the address clients connect to; via_addr: (host, path) -> that
    host's address on the path.
    """
    out = []
    for f in flows:
        dst_addr = f.dst_addr or addr_of.get(f.dst)
        if dst_addr is None:
            raise InputError(f"workload {f.workload!r}: no address known for host {f.dst!r}")
        bind = f.bind_addr
        if f.via is not None and bind is None:
            bind = (via_addr or {}).get((f.src, f.via))
            if bind is None:
                raise InputError(f"workload {f.workload!r}: host {f.src!r} has no interface "
                                 f"on path {f.via!r}")
        out.append(dataclasses.replace(f, dst_addr=dst_addr, bind_addr=bind))
    return out


def resolve_addresses(flows: list[FlowSpec], addr_of: dict[str, str],
                      via_addr: dict[tuple[str, str], str]) -> list[FlowSpec]:
    """Fill in addresses; a flow pinned ``via`` a path uses the path address of whichever
    end has one (client -> server: the client's source; server -> client: the client's
    destination), the primary address otherwise."""
    pinned = []
    for f in flows:
        if f.via is not None:
            dst = via_addr.get((f.dst, f.via)) or addr_of.get(f.dst)
            src = via_addr.get((f.src, f.via)) or addr_of.get(f.src)
            f = dataclasses.replace(f, dst_addr=dst, bind_addr=src)
        pinned.append(f)
    return resolve_flows(pinned, addr_of, via_addr)


def flow_sender_hosts(flows: Sequence[FlowSpec]) -> list[str]:
    """Hosts that send TCP/MPTCP data (where cwnd sampling makes sense)."""
    return sorted({f.src for f in flows if f.protocol in ("tcp", "mptcp")})
