"""``testbed run --dry-run``: the commands a run would execute, recorded without root.

`dry_run_commands` feeds the run's plan (`testbed.plan.netplan`) to the same command
builders a run uses (shaping, transport, MPTCP, captures, samplers, flow tools, pings,
the controller, the link schedule) and records them with a dry-run `CommandRunner`.
Mininet's own node and veth creation is not listed (Mininet does it itself).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from testbed.core.commands import CommandRunner
from testbed.plan.netplan import NetworkPlan, plan_network
from testbed.run.execute import CONTROLLER_PORT
from testbed.spec.model import CustomTopology
from testbed.spec.sweep import RunPlan

if TYPE_CHECKING:
    from mininet.topo import Topo


class _FakeHost:
    """Stands in for a Mininet host in a dry run (commands print ``# in <name>``)."""

    def __init__(self, name: str):
        self.name = name
        self.pid = 0


def dry_run_commands(run: RunPlan, run_dir: Path) -> CommandRunner:
    """The commands the first run would execute, recorded by a dry-run runner (no root).

    run: the run; run_dir: where its bundle would be (paths in the commands).
    Mininet's own node and veth creation is not listed (Mininet does it itself).
    """
    from testbed.host.capture import tcpdump_argv
    from testbed.host.mptcp import HostInterface, plan_mptcp
    from testbed.host.sampler import ss_argv
    from testbed.host.traffic.flows import assign_ports, client_argv, server_argv
    from testbed.host.traffic.ping import ping_argv
    from testbed.host.transport import buffer_sysctls, check_sysctls, sysctl_write_argv
    from testbed.net import shaping as sh
    from testbed.plan.flows import flow_sender_hosts
    from testbed.plan.links import link_groups

    exp = run.spec
    run_dir = Path(run_dir)
    runner = CommandRunner(dry_run=True)
    if isinstance(exp.topology, CustomTopology):
        return runner  # a custom topology is code: a dry run neither imports nor builds it
    plan = plan_network(run)
    topo = plan.topo
    fake = {h: _FakeHost(h) for h in topo.hosts()}
    switches = set(topo.switches())
    _dry_run_controller(runner, plan, run_dir)
    for link in link_groups(topo).values():
        for eg in link.egress:
            for argv in sh.setup_commands(eg.intf, link.shape):
                runner.run(argv, host=fake[eg.node] if eg.node not in switches else None)
    for host, argv in getattr(topo, "setup_commands", list)():
        runner.run(argv, host=fake[host])
    ts = plan.transport
    for h in plan.hosts:
        values = {"net.ipv4.tcp_congestion_control": exp.transport.cc,
                  **buffer_sysctls(ts.rmem, ts.wmem), **check_sysctls(ts.sysctl)}
        for key, value in values.items():
            runner.run(sysctl_write_argv(key, value), host=fake[h])
        if ts.protocol == "mptcp":
            ifaces = _topo_interfaces(topo, h)
            for step in plan_mptcp(ts, [HostInterface(n, a) for n, a in ifaces],
                                   plan.roles[h],
                                   bool(getattr(topo, "server_multihomed", False))):
                runner.run(list(step.argv), host=fake[h])
    for h, intf in plan.captures:
        runner.spawn(tcpdump_argv(intf, run_dir / "pcap" / f"{h}-{intf}.pcap",
                                  exp.capture.snaplen), host=fake[h])
    if exp.sampler.enabled:
        for h in exp.sampler.hosts or flow_sender_hosts(plan.flows):
            runner.run(ss_argv(), host=fake[h])
    flows, servers = assign_ports(plan.flows)
    logs = run_dir / "logs"
    for (h, proto), port in servers.items():
        role = "sink" if proto == "udp" else "server"
        runner.spawn(server_argv(port, proto, logs / f"flowtool-{role}-{h}-{port}.jsonl"),
                     host=fake[h])
    for src in sorted({f.src for f in flows}):
        runner.spawn(client_argv(logs / f"flows-{src}.json", logs / f"flows-{src}.jsonl",
                                 0.0), host=fake[src])
    for p in plan.pings:
        runner.spawn(ping_argv(p.dst_addr, interval=p.interval, count=p.count,
                               duration=p.duration, size=p.size, bind=p.bind),
                     host=fake[p.host])
    _dry_run_schedule(runner, plan, fake)
    return runner


def _dry_run_schedule(runner: CommandRunner, plan: NetworkPlan,
                      fake: dict[str, _FakeHost]) -> None:
    """The schedule's link changes as `Network.apply` makes them at their times: per event
    and namespace one ``tc -force -batch -`` for shape changes, then one ``ip -force
    -batch -`` for down/up, each with its input (what the batch shells are sent)."""
    from testbed.core.batch import batch_text
    from testbed.net import shaping as sh
    from testbed.plan.links import link_groups

    links = link_groups(plan.topo)
    shapes = {name: link.shape for name, link in links.items()}
    up = dict.fromkeys(links, True)
    for ev in plan.events:
        link = links[ev.link]
        new = ev.apply_to(shapes[ev.link])
        jobs: list[tuple[str, str, list[list[str]]]] = []  # (tool, node, commands)
        if new != shapes[ev.link]:
            per_node: dict[str, list[list[str]]] = {}
            for eg in link.egress:
                per_node.setdefault(eg.node if eg.in_namespace else "", []).extend(
                    sh.change_commands(eg.intf, shapes[ev.link], new))
            jobs += [("tc", node, cmds) for node, cmds in per_node.items()]
            shapes[ev.link] = new
        if ev.up is not None and ev.up != up[ev.link]:
            per_node = {}
            for eg in link.updown:
                per_node.setdefault(eg.node if eg.in_namespace else "", []).append(
                    sh.link_state_command(eg.intf, ev.up))
            jobs += [("ip", node, cmds) for node, cmds in per_node.items()]
            up[ev.link] = ev.up
        for tool, node, cmds in jobs:
            runner.run([tool, "-force", "-batch", "-"], input=batch_text(cmds),
                       host=fake[node] if node else None, at=ev.at)


def _dry_run_controller(runner: CommandRunner, plan: NetworkPlan, run_dir: Path) -> None:
    """The controller's command line and (spray) its nftables tables, as a run makes them."""
    kind = plan.spec.controller_kind()
    if kind == "none":
        return
    import sys

    from controllers.launcher import controller_argv
    from controllers.paths import compute_routes
    from controllers.registry import canonical_app
    from controllers.rules import spray_nft_script

    app = canonical_app(kind)
    log = run_dir / "logs" / "controller.log"
    runner.spawn(controller_argv(sys.executable, app, CONTROLLER_PORT,
                                 log.with_name(log.name + ".layout.json"),
                                 log.with_name(log.name + ".status.jsonl")))
    if app == "spray":
        layout = plan.topo.layout  # a controller runs on a fat-tree only
        routes = compute_routes(layout)
        for sw in layout.switches:
            script = spray_nft_script(routes, sw.name)
            if script is not None:
                runner.run(["nft", "-f", "-"], input=script)


def _topo_interfaces(topo: Topo, host: str) -> list[tuple[str, str]]:
    """(interface, address) of host from the topology's link options."""
    out = []
    for n1, n2, info in topo.links(sort=True, withInfo=True):
        for node, port, params in ((n1, info.get("port1"), info.get("params1")),
                                   (n2, info.get("port2"), info.get("params2"))):
            ip = (params or {}).get("ip")
            if node == host and ip:
                out.append((f"{node}-eth{port}", str(ip).split("/")[0]))
    return sorted(out)

