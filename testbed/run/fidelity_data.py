"""What a run reads around its traffic for the fidelity verdict (`analysis.fidelity`):
packets the OVS datapath lost on upcalls, the qdiscs' drops, and the rest of
``fidelity_raw`` in ``metadata.json`` (RPS mask, CPUs, each ping's configured RTT).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from testbed.core.commands import CommandRunner
from testbed.plan.netplan import NetworkPlan
from testbed.plan.pings import off_path_switches

if TYPE_CHECKING:
    from testbed.net.network import Network


def dp_lost(runner: CommandRunner, net: Network) -> int | None:
    """Packets the OVS kernel datapath has lost on upcalls so far (None: no switches,
    or ovs-dpctl could not tell)."""
    from testbed.net.monitor import parse_dpctl_lost

    if not net.topo.switches():
        return None
    res = runner.run(["ovs-dpctl", "show"], timeout=20, check=False)
    return parse_dpctl_lost(res.stdout) if res.returncode == 0 else None


def qdisc_drops(runner: CommandRunner) -> dict[str, int] | None:
    """Packets each root-namespace interface's qdiscs have dropped so far."""
    from testbed.net.monitor import parse_qdisc_drops

    res = runner.run(["tc", "-s", "-j", "qdisc", "show"], timeout=20, check=False)
    return parse_qdisc_drops(res.stdout) if res.returncode == 0 else None


def fidelity_extra(runner: CommandRunner, net: Network, plan: NetworkPlan,
                   dp_lost_before: int | None) -> dict[str, Any]:
    """The rest of ``fidelity_raw``: upcalls lost, RPS, CPUs, each ping's configured RTT.

    dp_lost_before: `dp_lost` before the traffic (None: not counted).
    """
    from testbed.net.steering import online_cpus
    from testbed.plan.links import base_rtt_s

    after = dp_lost(runner, net) if dp_lost_before is not None else None
    rtts = []
    for p in plan.pings:
        avoid = off_path_switches(plan.spec, plan.topo, p.path)
        rtt = base_rtt_s(plan.topo, p.host, p.dst, avoid)
        rtts.append({"name": p.name, "src": p.src, "dst": p.dst, "path": p.path,
                     "base_rtt_ms": None if rtt is None else round(rtt * 1000, 3)})
    return {"ovs_upcalls_lost": None if after is None or dp_lost_before is None
            else after - dp_lost_before,
            "rps_mask": net.rps_mask, "cpus": len(online_cpus()),
            "pings": rtts}
