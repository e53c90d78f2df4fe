"""QuickIntf / QuickHost: the ip(8) batches they send, on a recording fake node."""

from __future__ import annotations

import shlex
import subprocess

import pytest
from mininet.node import OVSSwitch

from testbed.core.errors import RunError
from testbed.net import mininet_nodes
from testbed.net.mininet_nodes import (
    ProbedOVSSwitch,
    QuickHost,
    QuickIntf,
    ip_batch_line,
    is_vsctl_error,
    split_ip,
    with_inactivity_probe,
)


class FakeNode:
    """Records the shell lines a node is asked to run; answers with canned output."""

    def __init__(self, name: str = "h1", reply: str = ""):
        self.name = name
        self.lines: list[str] = []
        self.intfs: dict[int, QuickIntf] = {}
        self.reply = reply

    def cmd(self, line: str) -> str:
        self.lines.append(line)
        return self.reply

    def addIntf(self, intf, port=None, **_):  # Mininet's spelling
        self.intfs[port if port is not None else len(self.intfs)] = intf

    def delIntf(self, intf):  # Mininet's spelling
        self.intfs = {p: i for p, i in self.intfs.items() if i is not intf}


def batch_of(line: str) -> list[str]:
    """The lines a `ip_batch_line` feeds to ip, by running its printf in a real shell."""
    printf = line.split(" | ")[0]
    out = subprocess.run(["bash", "-c", printf], capture_output=True, text=True, check=True)
    assert line.endswith("| ip -force -batch -")
    return out.stdout.splitlines()


def test_ip_batch_line_round_trips_and_refuses_shell_words():
    lines = ["link set dev h1-eth0 up", "addr add 10.0.0.1/24 dev h1-eth0"]
    assert batch_of(ip_batch_line(lines)) == lines
    with pytest.raises(ValueError):
        ip_batch_line(["link set dev x;rm up"])
    with pytest.raises(ValueError):
        ip_batch_line(["link set dev $(id) up"])


def test_split_ip():
    assert split_ip("10.0.0.1/8") == ("10.0.0.1", 8)
    assert split_ip("10.0.0.1", 24) == ("10.0.0.1", 24)
    with pytest.raises(RunError):
        split_ip("10.0.0.1")


def test_link_interface_is_one_batch_and_skips_the_mac_it_was_created_with():
    node = FakeNode()
    QuickIntf("h1-eth0", node=node, port=0, link=object(), mac="00:00:00:00:00:01",
              ip="10.0.0.1/24")
    assert len(node.lines) == 1  # one program start for MAC, address and up
    assert batch_of(node.lines[0]) == ["addr flush dev h1-eth0",
                                       "addr add 10.0.0.1/24 dev h1-eth0",
                                       "link set dev h1-eth0 up"]


def test_new_mac_is_applied_down_change_up_and_repeats_are_skipped():
    node = FakeNode()
    intf = QuickIntf("h1-eth0", node=node, port=0, link=None, up=False)
    assert node.lines == []
    intf.setMAC("00:00:00:00:00:01")
    assert batch_of(node.lines[0]) == ["link set dev h1-eth0 down",
                                           "link set dev h1-eth0 address 00:00:00:00:00:01",
                                           "link set dev h1-eth0 up"]
    node.lines.clear()
    intf.setMAC("00:00:00:00:00:01")
    intf.setIP("10.0.0.1", 24)
    intf.setIP("10.0.0.1", 24)
    assert len(node.lines) == 1  # the MAC it has: nothing; the address: once
    assert intf.IP() == "10.0.0.1" and intf.MAC() == "00:00:00:00:00:01"


def test_a_refused_change_raises_instead_of_being_logged():
    node = FakeNode(reply="RTNETLINK answers: Operation not permitted")
    with pytest.raises(RunError, match=r"h1-eth0 in h1.*not permitted"):
        QuickIntf("h1-eth0", node=node, port=0, link=None, ip="10.0.0.1/24")


def test_a_veth_pair_is_deleted_once():
    class FakeLink:
        pass

    n1, n2 = FakeNode("h1"), FakeNode("s1")
    link = FakeLink()
    a = QuickIntf("h1-eth0", node=n1, port=0, link=link, up=False)
    b = QuickIntf("s1-eth1", node=n2, port=1, link=link, up=False)
    a.delete()
    b.delete()
    assert n1.lines == ["ip link del h1-eth0"] and n2.lines == []
    assert not n1.intfs and not n2.intfs


def test_host_config_is_one_batch_with_loopback():
    host = QuickHost.__new__(QuickHost)  # no shell: only config() is exercised
    node = FakeNode("h1")
    host.name, host.intfs, host.ports, host.nameToIntf = "h1", {}, {}, {}
    host.cmd = node.cmd
    intf = QuickIntf("h1-eth0", node=node, port=0, link=object(), mac="00:00:00:00:00:09",
                     ip="10.0.0.1/24")
    host.intfs[0] = intf
    node.lines.clear()
    host.config(mac="00:00:00:00:00:01", ip="10.0.0.1/24")
    assert len(node.lines) == 1
    lines = batch_of(node.lines[0])
    assert "link set dev h1-eth0 address 00:00:00:00:00:01" in lines
    assert not any(line.startswith("addr") for line in lines)  # the address it has
    assert lines[-1] == "link set dev lo up"
    assert shlex.split(node.lines[0])[0] == "printf"


def test_controller_records_get_the_probe_at_creation():
    args = ('-- --id=@s1c0 create Controller target=\\"tcp:127.0.0.1:6653\\" max_backoff=1000'
            ' -- --id=@s1c1 create Controller target=\\"tcp:127.0.0.1:6654\\"'
            ' -- add-br s1 -- set bridge s1 controller=[@s1c0,@s1c1]')
    out = with_inactivity_probe(args, 30000)
    assert out.count("create Controller inactivity_probe=30000 target=") == 2
    assert out.replace(" inactivity_probe=30000", "") == args


def test_probed_switch_passes_the_probe_to_ovs_vsctl():
    sw = ProbedOVSSwitch.__new__(ProbedOVSSwitch)  # no OVS: only vsctl() is exercised
    seen: list[tuple] = []
    sw.batch, sw.inactivity_probe_ms, sw.vsctl_errors = False, 30000, []
    sw.cmd = lambda *a, **_: seen.append(a)
    sw.vsctl('-- --id=@c create Controller target=\\"tcp:127.0.0.1:1\\" -- add-br s1')
    assert seen == [("ovs-vsctl",
                     '-- --id=@c create Controller inactivity_probe=30000 '
                     'target=\\"tcp:127.0.0.1:1\\" -- add-br s1')]
    sw.inactivity_probe_ms = None
    sw.vsctl("show")
    assert seen[-1] == ("ovs-vsctl", "show")


def test_vsctl_errors_are_told_from_silence_and_log_lines():
    assert is_vsctl_error("ovs-vsctl: unix:/run/openvswitch/db.sock: database connection "
                          "failed (Connection refused)\n")
    assert not is_vsctl_error("")
    assert not is_vsctl_error("2026-11-22T05:00:00Z|00001|ovs-vsctl|WARN|slow\n")


def fake_switch(outputs: list[str]) -> ProbedOVSSwitch:
    """A switch whose ovs-vsctl answers outputs in turn (then silence)."""
    sw = ProbedOVSSwitch.__new__(ProbedOVSSwitch)
    sw.name, sw.batch, sw.inactivity_probe_ms, sw.vsctl_errors = "E5", False, None, []
    sw.calls = []
    def cmd(*args: str, **_: object) -> str:
        sw.calls.append(args)
        return outputs.pop(0) if outputs else ""
    sw.cmd = cmd
    return sw


def test_switch_start_retries_a_refused_bridge_then_names_it(monkeypatch):
    monkeypatch.setattr(mininet_nodes, "VSCTL_RETRY_S", 0.0)
    # stands in for Mininet's start: its one bridge-creating ovs-vsctl
    monkeypatch.setattr(OVSSwitch, "start",
                        lambda self, controllers: self.vsctl("-- add-br", self.name))
    refused = "ovs-vsctl: transaction error: {\"details\":\"busy\"}\n"
    sw = fake_switch([refused])
    sw.start([])
    assert len(sw.calls) == 2 and sw.vsctl_errors == []
    sw = fake_switch([refused] * 3)
    with pytest.raises(RunError, match=r"bridge E5 \(3 tries\): ovs-vsctl: transaction"):
        sw.start([])
    assert len(sw.calls) == 3


def queued_switch(name: str, commands: list[str]) -> ProbedOVSSwitch:
    sw = ProbedOVSSwitch.__new__(ProbedOVSSwitch)  # no OVS: only the batch start-up
    sw.name, sw.batch, sw.commands = name, True, list(commands)
    return sw


def test_batch_startup_creates_every_bridge_in_one_transaction(monkeypatch):
    monkeypatch.setattr(mininet_nodes, "VSCTL_RETRY_S", 0.0)
    calls: list[str] = []
    answers = [("", "ovs-vsctl: transaction error: busy\n", 1), ("", "", 0)]

    def run(argv: list[str]) -> tuple[str, str, int]:
        assert isinstance(argv, list)
        calls.append(" ".join(argv))
        return answers.pop(0)

    sws = [queued_switch("A0", ["-- --if-exists del-br A0 -- add-br A0 "]),
           queued_switch("A1", ["-- --if-exists del-br A1 -- add-br A1"]),
           queued_switch("s9", [])]  # started on its own: nothing queued
    assert ProbedOVSSwitch.batchStartup(sws, run=run) == sws
    assert calls == ["ovs-vsctl -- --if-exists del-br A0 -- add-br A0 "
                     "-- --if-exists del-br A1 -- add-br A1"] * 2  # refused once, retried
    assert all(not s.batch and s.commands == [] for s in sws[:2])
    assert ProbedOVSSwitch.batchStartup(sws, run=run) == sws and len(calls) == 2


def test_batch_startup_names_the_bridges_when_ovs_keeps_refusing(monkeypatch):
    monkeypatch.setattr(mininet_nodes, "VSCTL_RETRY_S", 0.0)
    calls: list[str] = []

    def run(argv: list[str]) -> tuple[str, str, int]:
        calls.append(" ".join(argv))
        return "", "ovs-vsctl: transaction error: busy", 1

    sws = [queued_switch("E0", ["-- add-br E0"]), queued_switch("E1", ["-- add-br E1"])]
    with pytest.raises(RunError, match=r"bridges E0, E1 \(3 tries\): ovs-vsctl: trans"):
        ProbedOVSSwitch.batchStartup(sws, run=run)
    assert len(calls) == 3


def test_batch_startup_splits_a_command_line_too_long_for_one_exec(monkeypatch):
    monkeypatch.setattr(ProbedOVSSwitch, "argmax", 40)
    calls: list[str] = []

    def run(argv: list[str]) -> tuple[str, str, int]:
        calls.append(" ".join(argv))
        return "", "", 0

    sws = [queued_switch(f"E{i}", [f"-- add-br E{i} -- set x"]) for i in range(4)]
    ProbedOVSSwitch.batchStartup(sws, run=run)
    assert len(calls) == 4 and all(c.startswith("ovs-vsctl -- add-br") for c in calls)
    assert " ".join(c.removeprefix("ovs-vsctl ") for c in calls) == \
        " ".join(f"-- add-br E{i} -- set x" for i in range(4))


def test_batch_startup_runs_an_argument_list_never_a_shell(monkeypatch):
    seen: list[object] = []

    def run(*args: object, **kw: object) -> tuple[str, str, int]:
        assert "shell" not in kw
        seen.append(args[0])
        return "", "", 0

    ctl = '-- --id=@c0 create Controller target=\\"tcp:127.0.0.1:6653\\" max_backoff=1000'
    sws = [queued_switch("E0", [ctl + " -- add-br E0 -- set bridge E0 controller=[@c0]"])]
    ProbedOVSSwitch.batchStartup(sws, run=run)
    assert seen == [["ovs-vsctl", "--", "--id=@c0", "create", "Controller",
                     'target="tcp:127.0.0.1:6653"', "max_backoff=1000", "--", "add-br", "E0",
                     "--", "set", "bridge", "E0", "controller=[@c0]"]]


@pytest.mark.parametrize("word", ["$(reboot)", "a;b", "`id`", "a|b", "x>y", "a b'"])
def test_batch_startup_refuses_shell_words(word):
    def run(*args: object, **kw: object) -> tuple[str, str, int]:
        raise AssertionError("must not run")

    with pytest.raises((RunError, ValueError)):
        ProbedOVSSwitch.batchStartup([queued_switch("E0", [f"-- add-br {word}"])], run=run)


def test_batch_startup_timeout_names_the_bridges(monkeypatch):
    from testbed.core.errors import CommandTimeout

    def run(argv: list[str]) -> tuple[str, str, int]:
        raise CommandTimeout(argv, 600.0)

    with pytest.raises(RunError, match=r"bridges E0 within 600s"):
        ProbedOVSSwitch.batchStartup([queued_switch("E0", ["-- add-br E0"])], run=run)
    assert mininet_nodes.VSCTL_BATCH_TIMEOUT_S <= 600


class _HangingShell(mininet_nodes.BoundedCmd):
    """A node whose shell never prints its sentinel (a hung command)."""

    cmd_timeout_s = 0.05
    WAIT_AFTER_INTERRUPT_S = 0.05

    def __init__(self, answers: list[str] | None = None):
        self.name, self.waiting, self.interrupts = "h1", True, 0
        self.answers = answers

    def monitor(self, timeoutms: int | None = None, findPid: bool = True) -> str:
        assert timeoutms is not None  # never an unbounded wait
        if self.answers:
            self.waiting = len(self.answers) > 1
            return self.answers.pop(0)
        return ""

    def sendInt(self) -> None:
        self.interrupts += 1


def test_a_hung_node_command_is_interrupted_and_raises():
    node = _HangingShell()
    with pytest.raises(RunError, match=r"h1: a command did not finish within 0.05s"):
        node.waitOutput()
    assert node.interrupts == 1 and node.waiting is False


def test_a_node_command_that_finishes_returns_its_output():
    assert _HangingShell(["a", "b"]).waitOutput() == "ab"
    assert issubclass(QuickHost, mininet_nodes.BoundedCmd)
    assert issubclass(ProbedOVSSwitch, mininet_nodes.BoundedCmd)


def test_batch_shutdown_runs_bounded_argument_lists(monkeypatch):
    seen: list[list[str]] = []
    monkeypatch.setattr(mininet_nodes, "run_vsctl",
                        lambda argv: seen.append(argv) or ("", "", 0))

    class Sw:
        def __init__(self, name: str, pid: int):
            self.name, self.pid, self.terminated = name, pid, False

        def __str__(self) -> str:
            return self.name

        def isOldOVS(self) -> bool:
            return False

        def terminate(self) -> None:
            self.terminated = True

    sws = [Sw("E0", 101), Sw("E1", 102)]
    assert ProbedOVSSwitch.batchShutdown(sws) == sws
    assert seen == [["ovs-vsctl", "--if-exists", "del-br", "E0", "--", "--if-exists",
                     "del-br", "E1"], ["kill", "-HUP", "101", "102"]]
    assert all(s.terminated for s in sws)


def test_run_split_never_raises(monkeypatch):
    from testbed.core.errors import CommandTimeout

    def hang(argv):
        raise CommandTimeout(argv, 600.0)

    monkeypatch.setattr(mininet_nodes, "run_vsctl", hang)
    _out, err, code = mininet_nodes.run_split("ovs-vsctl del-br s1")
    assert code == 1 and "timed out" in err
