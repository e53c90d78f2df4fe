"""The one place a `testbed.net.network.Network` makes Mininet's network object.

`make_mininet` returns Mininet's `Mininet` for a topology, not yet built: hosts are
`QuickHost`, interfaces `QuickIntf` (`testbed.net.mininet_nodes`), switches
`ProbedOVSSwitch` with the kernel datapath, all created in one ``ovs-vsctl``
transaction.  Without a controller the switches run in OVS ``standalone`` mode (a
learning switch: fine for loop-free topologies such as `MultiHomedTopo`); with one, in
``secure`` mode pointing at ``tcp:127.0.0.1:<port>`` (`ControllerTarget`).  The
`Network` then calls the object's ``build()``, ``start()`` and ``stop()``
(`testbed.net.nettypes.MnNet`): those, and the node classes, are where Mininet runs
commands of its own, outside the `CommandRunner`.  A stand-in for this module's
`make_mininet` that returns an `MnNet` recording instead of creating is all a run
without Mininet needs.

Note: Mininet's first network raises some global limits and sysctls (``fixLimits``:
file descriptors, ``net.core.*mem_max``, ``net.ipv4.tcp_*mem``, neighbour table sizes);
these only grow and are not undone.
"""

from __future__ import annotations

import re
from functools import partial
from typing import TYPE_CHECKING

from testbed.core.commands import CommandRunner
from testbed.core.errors import MissingFeatureError
from testbed.core.recording import recording
from testbed.net.nettypes import ControllerHook, MnNet

if TYPE_CHECKING:
    from mininet.topo import Topo

    from testbed.net.mininet_nodes import ProbedOVSSwitch

DEFAULT_CONTROLLER_PORT = 6653


class ControllerTarget:
    """What Mininet's switches need to know about a remote controller (no shell, no
    telnet probe, unlike Mininet's `RemoteController`)."""

    protocol = "tcp"

    def __init__(self, name: str, ip: str = "127.0.0.1", port: int = DEFAULT_CONTROLLER_PORT):
        self.name = name
        self.ip = ip
        self.port = port

    def IP(self) -> str:  # Mininet's spelling
        return self.ip

    def start(self) -> None:
        """Nothing to start: the controller process belongs to the controller hook."""

    def stop(self) -> None:
        """Nothing to stop (see `start`)."""

    def __repr__(self) -> str:
        return f"<ControllerTarget {self.ip}:{self.port}>"


def switch_class(controller: ControllerHook | None, tag: str | None = None
                 ) -> partial[ProbedOVSSwitch]:
    """The switch constructor Mininet gets: standalone without a controller, secure
    with one (its ``protocols`` and ``inactivity_probe_ms``); tag: the network's, set on
    every bridge."""
    from testbed.net.mininet_nodes import ProbedOVSSwitch

    # batch: every bridge in one ovs-vsctl transaction (`ProbedOVSSwitch.batchStartup`)
    if controller is None:
        return partial(ProbedOVSSwitch, datapath="kernel", failMode="standalone",
                       batch=True, tag=tag)
    protocols = getattr(controller, "protocols", "OpenFlow13")
    probe = getattr(controller, "inactivity_probe_ms", None)
    return partial(ProbedOVSSwitch, datapath="kernel", failMode="secure",
                   protocols=protocols, inactivity_probe_ms=probe, batch=True, tag=tag)


def prepare_ovs(runner: CommandRunner, topo: Topo) -> None:
    """Stand in for Mininet's OVS check, whose 1 s ``ovs-vsctl -t 1 show`` times out on
    a loaded VM and then calls exit(1); `testbed.net.bringup.preflight` checked OVS with
    10 s.  Sets Mininet's class-wide OVS version (``ovs-vsctl --version``)."""
    from mininet.node import OVSSwitch

    if topo.switches() and recording(runner):
        runner.run(["ovs-vsctl", "--version"])  # as a real run's first network asks
        return
    if topo.switches() and not OVSSwitch.isSetup:
        found = re.findall(r"\d+\.\d+", runner.run(["ovs-vsctl", "--version"]).stdout)
        if not found:
            raise MissingFeatureError("cannot tell the Open vSwitch version "
                                      "(ovs-vsctl --version)")
        OVSSwitch.OVSVersion = found[0]
        OVSSwitch.isSetup = True


def make_mininet(runner: CommandRunner, topo: Topo, controller: ControllerHook | None,
                 tag: str | None = None) -> MnNet:
    """Mininet's network for topo, not built yet (nothing exists until ``build()``).

    runner: runs the OVS version check; controller: None (standalone switches) or the
    hook whose ``port`` (default 6653) the switches connect to; tag: the network's, which
    every bridge carries (`testbed.net.tags`).  With a recording runner
    (a dry run) a `testbed.net.recorded_mininet.RecordedMininet`."""
    prepare_ovs(runner, topo)
    if recording(runner):  # a dry run: nothing may be made
        from testbed.net.recorded_mininet import RecordedMininet

        return RecordedMininet(topo)
    from mininet.link import Link
    from mininet.net import Mininet

    from testbed.net.mininet_nodes import QuickHost, QuickIntf

    mn = Mininet(topo=topo, switch=switch_class(controller, tag), host=QuickHost,
                 link=Link, intf=QuickIntf, controller=None, build=False,
                 autoSetMacs=True, cleanup=False, waitConnected=False)
    if controller is not None:
        port = int(getattr(controller, "port", DEFAULT_CONTROLLER_PORT))
        mn.addController("c0", controller=lambda name, **_: ControllerTarget(
            name, "127.0.0.1", port))
    return mn
