"""The steps of starting a network that run commands, apart from Mininet's own.

In the order `testbed.net.network.Network.start` takes them: `preflight` refuses names
that already exist (so Mininet's "delete before create" can never touch someone else's
bridge or interface) and a machine without root or Open vSwitch; after the switches
started, `check_bridges` makes sure OVS has every bridge; then `offloads_off` turns
segmentation offloads off on host interfaces (so every skb is one packet),
`steer_flows` sets receive packet steering on every interface (`testbed.net.steering`:
no reordering made by the emulator), and `run_setup_commands` runs the topology's
routing set-up with few program starts.  Every command goes through the runner.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from testbed.core.commands import CommandRunner, in_parallel
from testbed.core.errors import CommandError, MissingFeatureError, NodeError, RunError
from testbed.core.recording import recording
from testbed.net import shaping as sh
from testbed.net.cleanup import parse_link_names
from testbed.net.nettypes import MnNet, MnNode, MnSwitch, NodeLookup
from testbed.net.steering import rps_command
from testbed.net.tags import alias_batch
from testbed.plan.links import PlannedLink

if TYPE_CHECKING:
    from mininet.topo import Topo

RunBatches = Callable[[CommandRunner, dict[str, list[list[str]]]], None]
"""Runs commands by namespace through batch shells (`testbed.net.linkstate.BatchShells.run`)."""


def preflight(runner: CommandRunner, topo: Topo, planned: Sequence[PlannedLink]) -> None:
    """Refuse to start without root, with an interface or OVS bridge of the topology's
    already there, or without a running Open vSwitch (when there are switches)."""
    if os.geteuid() != 0 and not recording(runner):  # a dry run needs no root
        raise MissingFeatureError("starting a network needs root; run as root or use "
                                  "`testbed vm -- ...`")
    existing = set(parse_link_names(runner.run(["ip", "-o", "link", "show"]).stdout))
    wanted = set(topo.switches())
    for _n1, _n2, i1, i2, _info in planned:
        wanted |= {i1, i2}
    clash = sorted(wanted & existing)
    if clash:
        raise NodeError(f"interfaces {', '.join(clash[:8])} already exist; another network "
                       "is running or a previous run left them (see its network.json: "
                       "`cleanup_from_manifest`)")
    if topo.switches():
        try:
            bridges = set(runner.run(["ovs-vsctl", "--timeout=10", "list-br"]).stdout.split())
        except CommandError as exc:
            raise MissingFeatureError("Open vSwitch is not running (ovs-vsctl failed); "
                                      "start it with `/usr/share/openvswitch/scripts/"
                                      "ovs-ctl start` or use `testbed vm`") from exc
        clash = sorted(bridges & set(topo.switches()))
        if clash:
            raise NodeError(f"OVS bridges {', '.join(clash)} already exist; another "
                           "network is running")


def check_bridges(runner: CommandRunner, switches: Sequence[MnSwitch]) -> None:
    """Every switch of the topology is a bridge in OVS now (one ``ovs-vsctl`` call)."""
    if not switches:
        return
    bridges = set(runner.run(["ovs-vsctl", "--timeout=30", "list-br"]).stdout.split())
    missing = [s.name for s in switches if s.name not in bridges]
    if missing:
        raise RunError(f"Open vSwitch has no bridge for {', '.join(missing[:8])} after "
                       "the switches started; see ovs-vswitchd's log "
                       "(/var/log/openvswitch/ovs-vswitchd.log)")


def tag_interfaces(runner: CommandRunner, mn: MnNet, tag: str) -> None:
    """Set the network's tag as the alias of every link end in the root namespace (the
    switch side; a host's ends go with its namespace), in one ``ip -batch -``: clean-up
    deletes an interface only while it carries it (`testbed.net.tags`)."""
    names = [intf.name for link in mn.links for intf in (link.intf1, link.intf2)
             if intf is not None and not getattr(intf.node, "inNamespace", True)]
    if names and tag:
        runner.run(["ip", "-batch", "-"], input=alias_batch(names, tag))


def offloads_off(runner: CommandRunner, hosts: Sequence[MnNode]) -> None:
    """TSO/GSO/GRO off on every host interface but ``lo``: a host at a time on a few
    threads (a fat-tree has 16)."""
    def one_host(h: MnNode) -> None:
        for intf in h.intfList():
            if intf.name != "lo":
                runner.run(sh.offload_command(intf.name), host=h)
    in_parallel(one_host, list(hosts))


def steer_flows(runner: CommandRunner, interfaces: dict[str, list[str]], mask: str,
                node: NodeLookup) -> None:
    """Receive packet steering on every interface of this network (one program
    start per namespace): each flow's packets go through one CPU's backlog, so the
    emulator does not reorder them (`testbed.net.steering`, docs/fidelity.md).

    interfaces: by the node whose namespace holds them ("" for the root namespace);
    mask: the CPUs (`testbed.net.steering.cpu_mask`)."""
    groups = sorted(interfaces.items())

    def steer(item: tuple[str, list[str]]) -> None:
        name, intfs = item
        runner.run(rps_command(intfs, mask), host=node(name) if name else None)
    in_parallel(steer, groups)


def run_setup_commands(runner: CommandRunner, cmds: Sequence[tuple[str, list[str]]],
                       node: NodeLookup, run_batches: RunBatches) -> None:
    """The topology's (host, argv) routing set-up with few program starts: a host's
    ``sysctl -q -w`` writes as one, its ``ip`` commands through its batch shell (each
    still in the transcript), anything else as it comes; sysctls before routes."""
    sysctls: dict[str, list[str]] = {}
    ip_cmds: dict[str, list[list[str]]] = {}
    for host, argv in cmds:
        if argv[:3] == ["sysctl", "-q", "-w"]:
            sysctls.setdefault(host, []).extend(argv[3:])
        elif argv[0] == "ip":
            ip_cmds.setdefault(host, []).append(argv)
        else:
            runner.run(argv, host=node(host))
    for host, values in sysctls.items():
        runner.run(["sysctl", "-q", "-w", *values], host=node(host))
    run_batches(runner, ip_cmds)
