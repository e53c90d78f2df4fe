"""Unit tests for testbed.host.mptcp: golden command plans and parsers (no root)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from testbed.core.commands import Result
from testbed.core.errors import CommandError, InputError, UnsupportedError
from testbed.host.mptcp import (
    HostInterface,
    alias_address,
    configure_host,
    endpoint_argv,
    join_reads,
    parse_endpoints,
    parse_limits,
    parse_rules,
    plan_mptcp,
    scheduler_steps,
    split_reads,
)
from testbed.plan.transport import TransportSettings
from testbed.spec.model import Transport
from testbed.spec.quantities import USER_TEXT

CLIENT = [HostInterface("client-eth0", "10.0.1.1"), HostInterface("client-eth1", "10.0.2.1")]
SERVER_MH = [HostInterface("server-eth0", "10.0.1.2"), HostInterface("server-eth1", "10.0.2.2")]


def argvs(steps) -> list[str]:
    return [" ".join(s.argv) for s in steps]


def test_client_plan_single_homed_server() -> None:
    got = argvs(plan_mptcp(TransportSettings(protocol="mptcp"), CLIENT, "client"))
    assert got == [
        "sysctl -q -w net.mptcp.enabled=1",
        "ip mptcp limits set subflows 1 add_addr_accepted 1",
        "ip mptcp endpoint flush",
        "sysctl -q -w net.ipv4.conf.all.rp_filter=2",
        "ip route replace 10.0.2.0/24 dev client-eth1 scope link table 102",
        "ip rule add from 10.0.2.1 table 102 priority 102",
        "ip mptcp endpoint add 10.0.2.1 dev client-eth1 subflow",
    ]


def test_client_plan_with_gateways_and_explicit_limit() -> None:
    ifs = [HostInterface("c-eth0", "10.0.1.1", 24, 101, "10.0.1.254"),
           HostInterface("c-eth1", "10.0.2.1", 24, 102, "10.0.2.254")]
    got = argvs(plan_mptcp(TransportSettings(protocol="mptcp", subflows=4), ifs, "client"))
    assert "ip mptcp limits set subflows 4 add_addr_accepted 4" in got
    assert "ip route replace default via 10.0.2.254 dev c-eth1 table 102" in got


def test_two_subflows_per_path_adds_addresses_on_every_interface() -> None:
    got = argvs(plan_mptcp(TransportSettings(protocol="mptcp", subflows_per_path=2),
                           CLIENT, "client"))
    assert "ip mptcp limits set subflows 3 add_addr_accepted 3" in got
    assert "ip addr replace 10.0.1.52/24 dev client-eth0" in got
    assert "ip addr replace 10.0.2.52/24 dev client-eth1" in got
    assert "ip rule add from 10.0.1.52 table 101 priority 101" in got
    eps = [a for a in got if a.startswith("ip mptcp endpoint add")]
    assert eps == ["ip mptcp endpoint add 10.0.1.52 dev client-eth0 subflow",
                   "ip mptcp endpoint add 10.0.2.1 dev client-eth1 subflow",
                   "ip mptcp endpoint add 10.0.2.52 dev client-eth1 subflow"]


def test_multihomed_server_signals_and_client_only_accepts() -> None:
    srv = argvs(plan_mptcp(TransportSettings(protocol="mptcp"), SERVER_MH, "server"))
    assert srv[-1] == "ip mptcp endpoint add 10.0.2.2 dev server-eth1 signal"
    assert "ip mptcp limits set subflows 8 add_addr_accepted 8" in srv
    assert not any(a.startswith("ip rule") for a in srv)
    cli = argvs(plan_mptcp(TransportSettings(protocol="mptcp"), CLIENT, "client",
                           peer_multihomed=True))
    assert not any("endpoint add" in a for a in cli)
    assert "ip mptcp limits set subflows 1 add_addr_accepted 1" in cli


def test_single_homed_server_gets_limits_only() -> None:
    got = argvs(plan_mptcp(TransportSettings(protocol="mptcp", subflows_per_path=2),
                           [HostInterface("server-eth0", "10.0.100.1")], "server"))
    assert got == ["sysctl -q -w net.mptcp.enabled=1",
                   "ip mptcp limits set subflows 8 add_addr_accepted 8",
                   "ip mptcp endpoint flush"]


def test_plan_errors() -> None:
    with pytest.raises(InputError, match="role"):
        plan_mptcp(TransportSettings(protocol="mptcp"), CLIENT, "peer")
    with pytest.raises(InputError, match="primary"):
        plan_mptcp(TransportSettings(protocol="mptcp"), CLIENT, "client", primary="x-eth9")
    with pytest.raises(InputError, match="endpoint flags"):
        endpoint_argv("10.0.0.1", "h1-eth0", "subflow sometimes")
    with pytest.raises(InputError, match="subflows_per_path"):
        TransportSettings(subflows_per_path=9).check()


def test_alias_addresses() -> None:
    assert [alias_address("10.0.1.1", 24, j) for j in (1, 2, 3)] == \
        ["10.0.1.52", "10.0.1.103", "10.0.1.154"]
    assert alias_address("10.0.0.5", 8, 1) == "10.51.51.56"
    assert alias_address("10.0.1.254", 24, 1) == "10.0.1.49"  # wraps inside the subnet
    assert alias_address("10.0.1.204", 24, 1) == "10.0.1.254"  # not the broadcast .255
    assert alias_address("10.0.1.205", 24, 1) == "10.0.1.1"  # not the network .0
    with pytest.raises(UnsupportedError, match="too small"):
        alias_address("10.0.0.1", 30, 1)


def test_scheduler() -> None:
    ts = TransportSettings(protocol="mptcp", scheduler="redundant")
    with pytest.raises(UnsupportedError, match=r"kernel >= 6\.6"):
        scheduler_steps(ts, have_scheduler=False)
    assert scheduler_steps(TransportSettings(protocol="mptcp", scheduler="default"),
                           have_scheduler=False) == []
    with pytest.raises(UnsupportedError, match="available: default"):
        scheduler_steps(ts, True, ["default"])
    assert argvs(scheduler_steps(ts, True, ["default", "redundant"])) == \
        ["sysctl -q -w net.mptcp.scheduler=redundant"]
    assert scheduler_steps(TransportSettings(protocol="tcp", scheduler="x"), False) == []


def test_parsers_on_ip_output() -> None:
    # `ip mptcp endpoint show` / `limits show` / `ip rule show` as printed by iproute2 6.1
    eps = parse_endpoints("10.0.1.11 id 1 subflow fullmesh dev client-eth0 \n"
                          "10.0.2.1 id 2 subflow dev client-eth1 \n")
    assert eps == [{"addr": "10.0.1.11", "id": 1, "flags": ["subflow", "fullmesh"],
                    "dev": "client-eth0"},
                   {"addr": "10.0.2.1", "id": 2, "flags": ["subflow"], "dev": "client-eth1"}]
    assert parse_limits("add_addr_accepted 4 subflows 4 \n") == \
        {"add_addr_accepted": 4, "subflows": 4}
    rules = parse_rules("0:\tfrom all lookup local\n101:\tfrom 10.0.1.1 lookup 101\n"
                        "32766:\tfrom all lookup main\n")
    assert ("10.0.1.1", "101") in rules


def test_from_spec_takes_the_validated_transport() -> None:
    spec = Transport.model_validate({"protocol": "mptcp", "cc": "reno", "rmem": "64KiB",
                                     "subflows_per_path": 2}, context=USER_TEXT)
    ts = TransportSettings.from_spec(spec)
    assert (ts.protocol, ts.cc, ts.rmem, ts.subflows_per_path) == ("mptcp", "reno", 65536, 2)
    assert TransportSettings.from_spec(Transport()) == TransportSettings()
    assert TransportSettings.from_spec(spec, protocol="tcp").protocol == "tcp"
    with pytest.raises(InputError, match=r"transport\.protocol"):
        TransportSettings(protocol="sctp").check()


@dataclass
class Host:
    name: str = "client"
    pid: int = 1


@dataclass
class FakeIp:
    """Records commands; answers reads (rules exist already for 10.0.2.1)."""

    calls: list[list[str]] = field(default_factory=list)
    have_scheduler: bool = False
    batched: list[list[str]] = field(default_factory=list)
    refuse: str | None = None
    started: int = 0
    stopped: int = 0

    def run(self, argv, host=None, check=True, record=True, **_kw) -> Result:
        argv = list(argv)
        reads = split_reads(argv)  # several reads in one program start
        if reads is not None:
            out = join_reads([(name, self.run(cmd, host=host, check=False).stdout)
                              for name, cmd in reads])
            return Result(argv, 0, out, "", 0.0)
        self.calls.append(argv)
        out, rc = "", 0
        if argv == ["ip", "rule", "show"]:
            out = "102:\tfrom 10.0.2.1 lookup 102\n"
        elif argv[:2] == ["sysctl", "-n"]:
            for key in argv[2:]:  # like procps: a line per key it has, non-zero if any missing
                if key.startswith("net.mptcp.") and "sched" in key and not self.have_scheduler:
                    rc = 255
                elif key == "net.ipv4.tcp_available_congestion_control":
                    out += "reno cubic\n"
                elif key == "net.mptcp.available_schedulers":
                    out += "default blest\n"
                elif key == "net.mptcp.scheduler":
                    out += "default\n"
                else:
                    out += "1\n"
        elif argv[:4] == ["ip", "mptcp", "endpoint", "show"]:
            out = "10.0.2.1 id 1 subflow dev client-eth1 \n"
        elif argv[:4] == ["ip", "mptcp", "limits", "show"]:
            out = "add_addr_accepted 1 subflows 1 \n"
        return Result(argv, rc, out, "", 0.0)

    def ok(self, argv, **kw) -> bool:
        return self.run(argv, check=False, **kw).returncode == 0

    def batch_shell(self, tool, host=None) -> FakeShell:
        self.started += 1
        return FakeShell(self, tool)


@dataclass
class FakeShell:
    """An ``ip -batch`` shell: records each command, refuses endpoints if told to."""

    kernel: FakeIp
    tool: str
    refuse: str | None = None

    def run(self, cmds) -> float:
        for argv in cmds:
            self.kernel.calls.append(list(argv))
            self.kernel.batched.append(list(argv))
            if self.kernel.refuse and " ".join(argv).startswith(self.kernel.refuse):
                raise CommandError(["mnexec", "-a", "1", *argv], 1, "Error: busy", "client")
        return 0.0

    def stop(self) -> None:
        self.kernel.stopped += 1


def test_configure_host_skips_existing_rules_and_reports() -> None:
    ip = FakeIp()
    applied = configure_host(ip, Host(), TransportSettings(protocol="mptcp", cc="cubic"), CLIENT)
    assert ["ip", "rule", "add", "from", "10.0.2.1", "table", "102", "priority", "102"] \
        not in ip.calls
    assert ["ip", "mptcp", "endpoint", "add", "10.0.2.1", "dev", "client-eth1", "subflow"] \
        in ip.calls
    assert applied["endpoints"][0]["dev"] == "client-eth1"
    assert applied["limits"] == {"add_addr_accepted": 1, "subflows": 1}
    assert applied["mptcp_sysctl"]["net.mptcp.scheduler"] is None
    assert applied["sysctl"]["net.ipv4.tcp_congestion_control"] == "1"  # as read back


def test_configure_host_tcp_touches_no_mptcp_state() -> None:
    ip = FakeIp()
    applied = configure_host(ip, Host(), TransportSettings(protocol="tcp"), CLIENT)
    assert "endpoints" not in applied
    assert not any(a[:2] == ["ip", "mptcp"] for a in ip.calls)


def test_configure_host_refuses_scheduler_before_touching_endpoints() -> None:
    ip = FakeIp()
    with pytest.raises(UnsupportedError, match="scheduler"):
        configure_host(ip, Host(), TransportSettings(protocol="mptcp", scheduler="blest"),
                       CLIENT)
    assert not any(a[:3] == ["ip", "mptcp", "endpoint"] for a in ip.calls)


def test_configure_host_batches_ip_commands_and_sysctls() -> None:
    ip = FakeIp()
    applied = configure_host(ip, Host(), TransportSettings(protocol="mptcp", cc="cubic"), CLIENT)
    ip_cmds = [a for a in applied["commands"] if a[0] == "ip"]
    assert ip.batched == ip_cmds and ip.stopped >= 1   # all through the batch shell
    singles = [a for a in ip.calls if a[0] == "ip" and a not in ip.batched]
    assert all(a[-1] == "show" for a in singles)        # only reads run on their own
    # every MPTCP sysctl write in one program start (not one before and one after the
    # limits), before the ip commands; the reads before and after in one start each
    writes = [a for a in ip.calls if a[:3] == ["sysctl", "-q", "-w"]]
    assert writes[-1][3:] == ["net.mptcp.enabled=1", "net.ipv4.conf.all.rp_filter=2"]
    assert applied["commands"][:2] == [["sysctl", "-q", "-w", "net.mptcp.enabled=1"],
                                       ["sysctl", "-q", "-w", "net.ipv4.conf.all.rp_filter=2"]]
    assert ip.calls.index(writes[-1]) < ip.calls.index(ip_cmds[0])
    assert applied["mptcp_sysctl"]["net.mptcp.enabled"] == "1"


def test_configure_host_refused_endpoint_is_unsupported() -> None:
    ip = FakeIp(refuse="ip mptcp endpoint add")
    with pytest.raises(UnsupportedError, match="path manager refused `ip mptcp endpoint add"):
        configure_host(ip, Host(), TransportSettings(protocol="mptcp"), CLIENT)
    assert ip.stopped == ip.started >= 1  # the batch shells are stopped on failure too


def test_configure_host_reads_scheduler_and_its_list_in_one_go() -> None:
    ip = FakeIp(have_scheduler=True)
    applied = configure_host(ip, Host(), TransportSettings(protocol="mptcp",
                                                           scheduler="blest"), CLIENT)
    assert applied["mptcp_sysctl"]["net.mptcp.scheduler"] == "default"  # fake: as read
    (mptcp_writes,) = [a for a in ip.calls if a[:3] == ["sysctl", "-q", "-w"]
                       and "net.mptcp.enabled=1" in a]  # the MPTCP sysctls in one write
    assert "net.mptcp.scheduler=blest" in mptcp_writes
    with pytest.raises(UnsupportedError, match="available: default blest"):
        configure_host(FakeIp(have_scheduler=True), Host(),
                       TransportSettings(protocol="mptcp", scheduler="nope"), CLIENT)


def test_reads_in_one_program_start_come_apart_as_they_went_in() -> None:
    """`reads_argv` runs a few reads in one ``sh -c``; `split_reads` gives back each named
    command (what a dry run answers one by one) and `_read` each output by its name, an
    empty one and a missing one included."""
    from testbed.host.mptcp import _read, reads_argv

    argv = reads_argv(limits="ip mptcp limits show", sysctl="sysctl -n a.b c.d")
    assert split_reads(argv) == [("limits", ["ip", "mptcp", "limits", "show"]),
                                 ("sysctl", ["sysctl", "-n", "a.b", "c.d"])]
    assert split_reads(["sh", "-c", "echo hi"]) is None
    assert split_reads(["ip", "rule", "show"]) is None

    class Answers:
        def run(self, argv, **_kw) -> Result:
            text = join_reads([("limits", ""), ("sysctl", "1\n2\n")])
            return Result(argv, 0, text, "", 0.0)

    got = _read(Answers(), Host(), limits="x", sysctl="y", gone="z")
    assert got == {"limits": "", "sysctl": "1\n2", "gone": ""}
