"""transport.profile (issue 18): the spec key, its checks, the settings it merges and the
commands it builds (no root: a fake runner stands in for ip)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testbed.core.commands import Result
from testbed.core.errors import InputError, SpecError
from testbed.host.mptcp import HostInterface, configure_host, neighbour_sysctls, profile_record
from testbed.host.transport import (
    ROUTES_ARGV,
    apply_route_metrics,
    parse_routes,
    route_metric_argvs,
    without_metrics,
)
from testbed.net.hoststate import differences, parse_state, restore_commands
from testbed.plan.transport import TransportSettings, profile_overrides, profile_sysctls
from testbed.spec.profile import PROFILE_NAMES, TCP_2006, profile_named
from testbed.spec.sweep import plan_runs

SPEC = """name = "prof"
duration = "5s"

[topology]
kind = "multipath"
paths = [{ name = "access", bw = "10Mbit", delay = "1ms" }]

[transport]
%s

[[workload]]
kind = "bulk"
src = "client"
dst = "server"
%s
"""

TCP_2006_SYSCTLS = {"net.ipv4.tcp_sack": "0", "net.ipv4.tcp_dsack": "0",
                    "net.ipv4.tcp_frto": "0", "net.ipv4.tcp_recovery": "0",
                    "net.ipv4.tcp_early_retrans": "0", "net.ipv4.tcp_timestamps": "0"}

# `ip -4 -o route show table all` in a multipath client (the VM's iproute2), one route
# of path 0 down
ROUTES = """default via 10.0.1.254 dev client-eth0 table 101 \\
10.0.1.0/24 dev client-eth0 proto kernel scope link src 10.0.1.1 linkdown \\
local 10.0.1.1 dev client-eth0 table local proto kernel scope host src 10.0.1.1 \\
broadcast 10.0.1.255 dev client-eth0 table local proto kernel scope link src 10.0.1.1 \\
local 127.0.0.0/8 dev lo table local proto kernel scope host src 127.0.0.1 \\
"""


def spec(tmp_path: Path, transport: str, workload: str = "") -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(SPEC % (transport, workload))
    return path


# -- the spec key ---------------------------------------------------------------------
def test_the_default_profile_is_linux_and_changes_nothing(tmp_path: Path) -> None:
    exp = plan_runs(spec(tmp_path, 'cc = "cubic"'))[0].spec
    assert exp.transport.profile == "linux"
    ts = TransportSettings.from_spec(exp.transport)
    assert ts.sysctl == {} and ts.route_metrics == {}


def test_tcp_2006_without_cc_is_reno(tmp_path: Path) -> None:
    exp = plan_runs(spec(tmp_path, 'profile = "tcp-2006"'))[0].spec
    assert (exp.transport.profile, exp.transport.cc) == ("tcp-2006", "reno")


def test_tcp_2006_with_another_cc_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        plan_runs(spec(tmp_path, 'profile = "tcp-2006"\ncc = "cubic"'))
    lines = str(err.value).splitlines()
    assert len(lines) == 1
    assert "transport.cc" in lines[0] and "transport.profile" in lines[0]
    assert "'cubic'" in lines[0] and "'reno'" in lines[0]


def test_tcp_2006_refuses_a_workloads_cc_too(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        plan_runs(spec(tmp_path, 'profile = "tcp-2006"', 'cc = "bbr"'))
    (line,) = str(err.value).splitlines()
    assert "workload[0].cc" in line and "transport.profile" in line


def test_an_unknown_profile_names_the_choices(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="'linux' or 'tcp-2006'"):
        plan_runs(spec(tmp_path, 'profile = "ns2"'))


def test_the_profile_sweeps_and_sets_like_any_key(tmp_path: Path) -> None:
    path = spec(tmp_path, 'cc = "reno"')
    path.write_text(path.read_text()
                    + '\n[sweep]\n"transport.profile" = ["linux", "tcp-2006"]\n')
    runs = plan_runs(path)
    assert [r.spec.transport.profile for r in runs] == ["linux", "tcp-2006"]
    assert len({r.run_id for r in runs}) == 2
    (one,) = plan_runs(spec(tmp_path, ""), ["transport.profile=tcp-2006"])
    assert (one.spec.transport.profile, one.spec.transport.cc) == ("tcp-2006", "reno")


# -- what every host gets -------------------------------------------------------------
def test_tcp_2006_settings() -> None:
    assert PROFILE_NAMES == ("linux", "tcp-2006")
    assert TCP_2006.cc == "reno"
    assert TCP_2006.sysctl_values() == TCP_2006_SYSCTLS
    assert TCP_2006.route_values() == {"advmss": "1000", "initcwnd": "2"}
    assert all(s.mechanism for s in (*TCP_2006.sysctls, *TCP_2006.route_metrics))
    assert profile_named("linux").sysctl_values() == {}


def test_an_explicit_sysctl_wins_over_the_profile(tmp_path: Path) -> None:
    exp = plan_runs(spec(tmp_path, 'profile = "tcp-2006"\n'
                                   'sysctl = { "net.ipv4.tcp_sack" = 1, '
                                   '"net.ipv4.tcp_no_metrics_save" = 1 }'))[0].spec
    ts = TransportSettings.from_spec(exp.transport)
    assert ts.sysctl == {**TCP_2006_SYSCTLS, "net.ipv4.tcp_sack": "1",
                         "net.ipv4.tcp_no_metrics_save": "1"}
    assert ts.route_metrics == {"advmss": "1000", "initcwnd": "2"}
    assert profile_overrides(TCP_2006, exp.transport.sysctl) == {"net.ipv4.tcp_sack": "0"}
    # the same value as the profile's is no override
    assert profile_overrides(TCP_2006, {"net.ipv4.tcp_sack": 0}) == {}
    assert profile_sysctls(profile_named("linux"), {"net.ipv4.tcp_sack": 0}) == {
        "net.ipv4.tcp_sack": "0"}


def test_the_profile_record_names_each_mechanism_and_the_overrides() -> None:
    ts = TransportSettings(cc="reno", profile="tcp-2006",
                           sysctl={**TCP_2006_SYSCTLS, "net.ipv4.tcp_sack": "1"})
    rec = profile_record(ts)
    assert rec["name"] == "tcp-2006" and rec["cc"] == "reno"
    assert rec["sysctl"]["net.ipv4.tcp_frto"]["value"] == "0"
    assert "F-RTO" in rec["sysctl"]["net.ipv4.tcp_frto"]["mechanism"]
    assert rec["route_metrics"]["advmss"]["value"] == "1000"
    assert rec["overridden"] == {"net.ipv4.tcp_sack": "1"}


# -- route metrics: pure builders -----------------------------------------------------
def test_parse_routes_keeps_the_unicast_routes_without_state_flags() -> None:
    assert parse_routes(ROUTES) == [
        ["default", "via", "10.0.1.254", "dev", "client-eth0", "table", "101"],
        ["10.0.1.0/24", "dev", "client-eth0", "proto", "kernel", "scope", "link", "src",
         "10.0.1.1"]]


def test_route_metric_argvs_change_each_route_in_place() -> None:
    argvs = route_metric_argvs(parse_routes(ROUTES), TCP_2006.route_values())
    assert argvs == [
        ["ip", "route", "change", "default", "via", "10.0.1.254", "dev", "client-eth0",
         "table", "101", "advmss", "1000", "initcwnd", "2"],
        ["ip", "route", "change", "10.0.1.0/24", "dev", "client-eth0", "proto", "kernel",
         "scope", "link", "src", "10.0.1.1", "advmss", "1000", "initcwnd", "2"]]
    assert route_metric_argvs(parse_routes(ROUTES), {}) == []
    with pytest.raises(InputError, match="route metric"):
        route_metric_argvs(parse_routes(ROUTES), {"mtu": "1000"})


def test_a_metric_the_route_has_is_replaced() -> None:
    route = parse_routes("10.0.100.0/24 via 10.0.1.254 dev client-eth0 advmss lock 1400 "
                         "mtu 1500")[0]
    assert without_metrics(route) == ["10.0.100.0/24", "via", "10.0.1.254", "dev",
                                      "client-eth0", "mtu", "1500"]
    (argv,) = route_metric_argvs([route], {"advmss": "1000"})
    assert argv == ["ip", "route", "change", "10.0.100.0/24", "via", "10.0.1.254", "dev",
                    "client-eth0", "mtu", "1500", "advmss", "1000"]


# -- route metrics: applied through the runner ----------------------------------------
@dataclass
class Host:
    name: str = "client"
    pid: int = 1


@dataclass
class FakeKernel:
    """Answers route and sysctl reads; records commands and what went to ip -batch."""

    routes: str = ROUTES
    calls: list[list[str]] = field(default_factory=list)
    batched: list[list[str]] = field(default_factory=list)

    def run(self, argv, host=None, check=True, record=True, **_kw) -> Result:
        argv = list(argv)
        self.calls.append(argv)
        out = ""
        if argv == ROUTES_ARGV:
            out = self.routes
        elif argv[:2] == ["sysctl", "-n"]:
            out = "".join("reno cubic\n" if "available" in k else "0\n" for k in argv[2:])
        return Result(argv, 0, out, "", 0.0)

    def ok(self, argv, **kw) -> bool:
        return self.run(argv, check=False, **kw).returncode == 0

    def batch_shell(self, tool, host=None) -> FakeShell:
        return FakeShell(self)


@dataclass
class FakeShell:
    kernel: FakeKernel

    def run(self, cmds) -> float:
        for argv in cmds:
            self.kernel.batched.append(list(argv))
            # the kernel now has the metrics on that route
            words = argv[3:]
            base = " ".join(without_metrics(words))
            self.kernel.routes = self.kernel.routes.replace(base, " ".join(words))
        return 0.0

    def stop(self) -> None:
        pass


def test_apply_route_metrics_reads_changes_and_reads_back() -> None:
    k = FakeKernel()
    routes = apply_route_metrics(k, Host(), TCP_2006.route_values())
    assert k.batched == route_metric_argvs(parse_routes(ROUTES), TCP_2006.route_values())
    assert routes[0].endswith("table 101 advmss 1000 initcwnd 2")
    assert apply_route_metrics(FakeKernel(), Host(), {}) == []


def test_configure_host_applies_the_profile_everywhere_and_records_it() -> None:
    k = FakeKernel()
    ts = TransportSettings(cc="reno", profile="tcp-2006", sysctl=dict(TCP_2006_SYSCTLS))
    applied = configure_host(k, Host(), ts, [HostInterface("client-eth0", "10.0.1.1")])
    (write,) = [a for a in k.calls if a[:3] == ["sysctl", "-q", "-w"]
                and "net.ipv4.tcp_sack=0" in a]
    assert set(write[3:]) == {"net.ipv4.tcp_congestion_control=reno",
                              *(f"{key}={v}" for key, v in TCP_2006_SYSCTLS.items()),
                              # the kernel's default, written every run
                              *(f"{key}=1" for key in neighbour_sysctls(False))}
    assert applied["profile"]["name"] == "tcp-2006"
    assert len(applied["routes"]) == 2
    linux = configure_host(FakeKernel(), Host(), TransportSettings(cc="reno"),
                           [HostInterface("client-eth0", "10.0.1.1")])
    assert linux["profile"]["name"] == "linux" and "routes" not in linux


# -- a kept network puts the routes back ----------------------------------------------
STATE = """net.ipv4.tcp_sack = 1
@@testbed-hoststate routes
default via 10.0.1.254 dev client-eth0 table 101
10.0.1.0/24 dev client-eth0 proto kernel scope link src 10.0.1.1
"""


def test_a_route_whose_metrics_a_profile_changed_is_replaced_not_deleted() -> None:
    base = parse_state(STATE)
    now = parse_state(STATE.replace("= 1", "= 0")
                      .replace("table 101", "table 101 advmss 1000 initcwnd 2")
                      .replace("src 10.0.1.1", "src 10.0.1.1 advmss 1000 initcwnd 2"))
    assert restore_commands(base, now) == [
        ["sysctl", "-q", "-w", "net.ipv4.tcp_sack=1"],
        ["ip", "route", "replace", "default", "via", "10.0.1.254", "dev", "client-eth0",
         "table", "101"],
        ["ip", "route", "replace", "10.0.1.0/24", "dev", "client-eth0", "proto", "kernel",
         "scope", "link", "src", "10.0.1.1"]]
    assert len(differences(base, now)) == 5
