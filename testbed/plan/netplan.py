"""`NetworkPlan`: everything one run does on its network, computed once from the spec.

::

    plan = plan_network(run)
    plan.topo, plan.hosts      # the Mininet topology (built, not started), the hosts used
    plan.flows, plan.pings     # what runs between them, addresses resolved
    plan.events                # the link schedule, in time order

Nothing here touches the system: a plan is built, checked and printed without root.
The names the spec uses are checked against the built topology first (`SpecError`
naming the key), so a typo stops a run before its network is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from testbed.plan.flows import plan_flows, resolve_addresses
from testbed.plan.flowspec import FlowSpec
from testbed.plan.pings import PingTarget, ping_targets
from testbed.plan.schedule import ScheduleEvent, schedule_events
from testbed.plan.topology import (
    build_topology,
    capture_targets,
    check_against_topology,
    host_addresses,
    path_addresses,
    topo_hosts,
)
from testbed.plan.transport import TransportSettings, mptcp_roles, transport_settings
from testbed.spec.experiment import Experiment
from testbed.spec.sweep import RunPlan

if TYPE_CHECKING:
    from mininet.topo import Topo


@dataclass(frozen=True)
class NetworkPlan:
    """One run's network, hosts and workloads, as the spec and the topology give them.

    run_id, spec, seed: the run's (`testbed.spec.sweep.RunPlan`); topo: its Mininet
    topology; hosts: the hosts workloads may use; flows: every bulk/flows/cbr flow,
    addresses resolved; pings: every ping workload; addr_of: host -> primary address;
    path_addrs: (host, path) -> its address on the path (multipath topologies); roles:
    host -> MPTCP path-manager role; captures: (host, interface) pairs to capture;
    transport: what every host's transport is set to; events: the link schedule.
    """

    run_id: str
    spec: Experiment
    seed: int
    topo: Topo
    hosts: tuple[str, ...]
    flows: tuple[FlowSpec, ...]
    pings: tuple[PingTarget, ...]
    addr_of: Mapping[str, str]
    path_addrs: Mapping[tuple[str, str], str]
    roles: Mapping[str, str]
    captures: tuple[tuple[str, str], ...]
    transport: TransportSettings
    events: tuple[ScheduleEvent, ...]


def plan_network(run: RunPlan) -> NetworkPlan:
    """The `NetworkPlan` of one run (pure; raises `SpecError` naming the spec key for a
    name the topology lacks).

    run: the run.
    """
    exp = run.spec
    topo = build_topology(exp)
    check_against_topology(exp, topo)
    hosts = topo_hosts(exp, topo)
    addr_of, path_addrs = host_addresses(topo), path_addresses(exp, topo)
    flows = resolve_addresses(plan_flows(exp, run.seed, hosts), addr_of, path_addrs)
    return NetworkPlan(
        run_id=run.run_id, spec=exp, seed=run.seed, topo=topo, hosts=tuple(hosts),
        flows=tuple(flows), pings=tuple(ping_targets(exp, addr_of, path_addrs)),
        addr_of=addr_of, path_addrs=path_addrs, roles=mptcp_roles(exp, flows, hosts),
        captures=tuple(capture_targets(exp, topo, hosts)),
        transport=transport_settings(exp), events=tuple(schedule_events(exp)))
