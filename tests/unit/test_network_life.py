"""A network's whole life (start, schedule events, nft tables, end_run, begin_run, stop)
through a dry runner, with a stand-in for Mininet's network object: the commands, their
order and input, and the calls to Mininet and the controller are those in
``tests/data/network/life.txt`` (recorded before `Network` was split into parts, again
when the dry run became a recording of the real path: batch shells, no unrecorded queries).
Regenerate with ``TESTBED_REGEN_GOLDEN=1`` only for an intended change."""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace

import mininet.net
import mininet.node

from testbed.core.commands import CommandRunner, Result
from testbed.core.recording import RecordingRunner
from testbed.net import bringup, cleanup, hoststate
from testbed.net import network as network_mod
from testbed.net.network import Network
from testbed.plan.links import planned_links
from testbed.spec.linkshape import LinkShape
from testbed.spec.model import PathSpec, ScheduleEvent
from topologies.multipath import MultiHomedTopo
from topologies.pair import PairTopo

GOLDEN = Path(__file__).parents[1] / "data" / "network" / "life.txt"
SHAPE = LinkShape(bw_bps=10_000_000, delay_s=0.01)


class FakeNode:
    def __init__(self, name: str, in_namespace: bool, dpid: str | None = None):
        self.name, self.inNamespace, self.pid, self.shell = name, in_namespace, 999999, None
        self.intfs: list[SimpleNamespace] = []
        if dpid:
            self.dpid = dpid

    def intfList(self) -> list[SimpleNamespace]:
        return list(self.intfs)


def fake_mininet(calls: list[str]) -> type:
    """A Mininet class that makes nodes and links as plain objects and runs nothing."""
    class FakeMininet:
        def __init__(self, topo, switch, host, link, intf, **kw) -> None:
            calls.append(f"Mininet switch={sorted(switch.keywords.items())} host={host.__name__}"
                         f" link={link.__name__} intf={intf.__name__} {sorted(kw.items())}")
            self.topo = topo
            self.hosts: list[FakeNode] = []
            self.switches: list[FakeNode] = []
            self.links: list[SimpleNamespace] = []
            self.nameToNode: dict[str, FakeNode] = {}

        def addController(self, name: str, controller) -> None:
            calls.append(f"addController {name} {controller(name)!r}")

        def build(self) -> None:
            calls.append("build")
            self.hosts = [FakeNode(h, True) for h in self.topo.hosts()]
            self.switches = [FakeNode(s, False, f"{i + 1:016x}")
                             for i, s in enumerate(self.topo.switches())]
            self.nameToNode = {n.name: n for n in self.hosts + self.switches}
            for n1, n2, i1, i2, info in planned_links(self.topo):
                ends = []
                for n, i, p in ((n1, i1, info.get("params1")), (n2, i2, info.get("params2"))):
                    ip = (p or {}).get("ip")
                    intf = SimpleNamespace(name=i, node=self.nameToNode[n],
                                           IP=lambda ip=ip: ip.split("/")[0] if ip else None)
                    self.nameToNode[n].intfs.append(intf)
                    ends.append(intf)
                self.links.append(SimpleNamespace(intf1=ends[0], intf2=ends[1]))

        def start(self) -> None:
            calls.append("start")

        def stop(self) -> None:
            calls.append("stop")
    return FakeMininet


class OVSAnswers(RecordingRunner):
    """A runner that records and answers ``ovs-vsctl list-br`` (no bridge before the
    start, every switch after) and ``ovs-vsctl --version``.  It does not say it is a
    dry run's (``recording``), so that the network makes Mininet's network object
    through Mininet's class, which this test replaces to see how it is called."""

    recording = False

    def __init__(self, switches: list[str], started: bool = False):
        super().__init__()
        self.switches, self.started = switches, started

    def run(self, argv, **kw) -> Result:
        res = super().run(argv, **kw)
        if "list-br" in argv:
            out, self.started = ("\n".join(self.switches) if self.started else ""), True
            return Result(res.argv, 0, out, "", 0.0)
        if list(argv) == ["ovs-vsctl", "--version"]:
            return Result(res.argv, 0, "ovs-vsctl (Open vSwitch) 3.1.0", "", 0.0)
        return res


class Controller:
    port, protocols, inactivity_probe_ms = 6700, "OpenFlow13", 15000

    def __init__(self, tag: str, calls: list[str]):
        self.tag, self.calls = tag, calls

    def start(self) -> None:
        self.calls.append(f"{self.tag} start")

    def pre_switch_start(self, net: Network) -> None:
        self.calls.append(f"{self.tag} pre_switch_start")
        net.add_nft_tables([("netdev", f"spray_{self.tag}", "chain c {}")])

    def wait_ready(self, dpids, timeout: float) -> None:
        self.calls.append(f"{self.tag} wait_ready {list(dpids)} {timeout}")

    def post_switch_start(self, net: Network) -> None:
        self.calls.append(f"{self.tag} post_switch_start")

    def check_alive(self) -> None:
        self.calls.append(f"{self.tag} check_alive")

    def stop(self) -> None:
        self.calls.append(f"{self.tag} stop")


def lines(title: str, runner: CommandRunner, calls: list[str]) -> list[str]:
    """The transcript and the calls, machine-independent (CPU mask, sysctl names, pid)."""
    out = [f"== {title}"]
    for e in runner.transcript.entries:
        argv = list(e.argv)
        if "rps" in argv:
            argv[argv.index("rps") + 1] = "MASK"
        if "testbed-hoststate" in argv:
            argv = [*argv[:argv.index("testbed-hoststate") + 1], "KEYS"]
        line = f"{e.kind} {e.where} at={e.at} {argv!r} input={e.input!r}"
        out.append(re.sub(r"tbw\d+", "tbwPID", line))  # the warm-up veth is named by pid
    out += [f"call {c}" for c in calls]
    calls.clear()
    return out


def life(topo, controller: bool, events: list[ScheduleEvent], name: str, tmp: Path,
         calls: list[str]) -> list[str]:
    switches = list(topo.switches())
    first = OVSAnswers(switches)
    net = Network(topo, runner=first, controller=Controller("c1", calls) if controller else None,
                  workdir=tmp / "a", baseline_hosts=True, handle_signals=False)
    net.start()
    for ev in events:
        net.apply(ev)
    net.prepare_schedule(events)
    net.tc_dump()
    net.check()
    net.add_nft_table("inet", "t1", "chain x {}")
    net.end_run()
    out = lines("first run", first, calls)
    second = OVSAnswers(switches, started=True)
    net.begin_run(second, None, tmp / "b")
    net.set_up(name, False)
    net.set_shape(name, LinkShape(bw_bps=3_000_000, delay_s=0.03))
    net.stop()
    assert net.cleanup_errors == []
    out += lines("second run", second, calls)
    out.append(f"manifest {(tmp / 'b' / 'network.json').read_text()!r}")
    return out


def test_a_network_life_runs_the_recorded_commands(tmp_path: Path, monkeypatch) -> None:
    calls: list[str] = []  # to Mininet and to the controller, in order
    monkeypatch.setattr(mininet.net, "Mininet", fake_mininet(calls))
    monkeypatch.setattr(mininet.node.OVSSwitch, "isSetup", False)
    monkeypatch.setattr(mininet.node.OVSSwitch, "OVSVersion", None, raising=False)
    monkeypatch.setattr(bringup, "os", SimpleNamespace(geteuid=lambda: 0))  # as root
    monkeypatch.setattr(cleanup, "new_tag", lambda: "0123456789abcdef")  # the networks' tag
    # the creating process, in every manifest: one fixed here
    monkeypatch.setattr(network_mod, "this_process", lambda: [4141, 4242])

    def one_by_one(fn, items, workers=4):  # a transcript in one order
        return [fn(i) for i in items]
    monkeypatch.setattr(bringup, "in_parallel", one_by_one)
    monkeypatch.setattr(hoststate, "in_parallel", one_by_one)
    got: list[str] = []
    for title, topo, ctl, events, name in [
        ("pair", PairTopo(shape=SHAPE), False,
         [ScheduleEvent(at=1.0, link="link", bw=2_000_000),
          ScheduleEvent(at=2.0, link="link", down=True)], "link"),
        ("multi-homed", MultiHomedTopo(paths=[PathSpec(name=n, bw=10_000_000, delay=0.01)
                                              for n in ("wifi", "cell")]),
         True, [ScheduleEvent(at=1.0, link="wifi", bw=2_000_000, loss=1.0),
                ScheduleEvent(at=2.0, link="cell", down=True),
                ScheduleEvent(at=3.0, link="cell", down=False, delay=0.07)], "wifi")]:
        got += [f"# {title}", *life(topo, ctl, events, name, tmp_path / title, calls)]
    text = "\n".join(got) + "\n"
    if os.environ.get("TESTBED_REGEN_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
