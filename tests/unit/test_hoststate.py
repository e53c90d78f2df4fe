"""testbed.net.hoststate: a host's transport state read, compared and put back (pure parts)."""

from __future__ import annotations

import os
import subprocess

from testbed.net.hoststate import (
    HostState,
    differences,
    parse_state,
    restore_commands,
    state_argv,
    sysctl_keys,
)

# what `state_argv` printed in a multipath client (sections as the VM's tools print them)
TEXT = """net.ipv4.tcp_congestion_control = cubic
net.ipv4.tcp_rmem = 4096\t131072\t6291456
net.mptcp.enabled = 1
@@testbed-hoststate limits
add_addr_accepted 0 subflows 2\t
@@testbed-hoststate endpoints
@@testbed-hoststate rules
0:\tfrom all lookup local
101:\tfrom 10.0.1.1 lookup 101
32766:\tfrom all lookup main
@@testbed-hoststate routes
default via 10.0.1.254 dev client-eth0 table 101
10.0.1.0/24 dev client-eth0 proto kernel scope link src 10.0.1.1
"""


def test_parse_state_splits_the_sections():
    st = parse_state(TEXT)
    assert st.sysctls == {"net.ipv4.tcp_congestion_control": "cubic",
                          "net.ipv4.tcp_rmem": "4096 131072 6291456",
                          "net.mptcp.enabled": "1"}
    assert st.limits == {"add_addr_accepted": "0", "subflows": "2"}
    assert st.endpoints == []
    assert st.rules[1] == "101: from 10.0.1.1 lookup 101" and len(st.rules) == 3
    assert st.routes[0] == "default via 10.0.1.254 dev client-eth0 table 101"


def test_state_argv_passes_keys_as_arguments_and_runs_in_a_shell():
    argv = state_argv(["net.mptcp.enabled", "net.ipv4.tcp_rmem"])
    assert argv[:2] == ["sh", "-c"] and argv[-2:] == ["net.mptcp.enabled",
                                                       "net.ipv4.tcp_rmem"]
    assert "net.mptcp" not in argv[2]  # never spliced into the script
    # the script runs (here, read-only): sections come out in order, the ip(8) reads in
    # one batch, each told from the next by the loopback device's line
    out = subprocess.run([*argv[:3], "x"], capture_output=True, text=True,
                         env={"PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin"})
    marks = [ln for ln in out.stdout.splitlines() if ln.startswith("@@testbed-hoststate")]
    assert [m.split()[1] for m in marks] == ["ip", "addresses"]
    st = parse_state(out.stdout)
    rules = subprocess.run(["ip", "rule", "show"], capture_output=True, text=True).stdout
    routes = subprocess.run(["ip", "route", "show", "table", "all"], capture_output=True,
                            text=True).stdout
    assert st.rules == [" ".join(r.split()) for r in rules.splitlines() if r.strip()]
    assert st.routes == [" ".join(w for w in r.split() if w != "linkdown")
                         for r in routes.splitlines() if r.strip()]
    assert any(a.startswith("lo inet 127.0.0.1/") for a in st.addresses)
    assert not any("link/loopback" in x or ": lo: <" in x
                   for x in [*st.rules, *st.routes, *st.endpoints])


def test_the_ip_batch_section_splits_at_the_loopback_lines():
    """What the one ``ip -batch`` prints: limits, endpoints (none here), rules and
    routes, each followed by ``link show dev lo``'s two lines."""
    lo = ("1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT\n"
          "    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n")
    text = ("net.mptcp.enabled = 1\n@@testbed-hoststate ip\n"
            "add_addr_accepted 0 subflows 2 \n" + lo + lo +
            "0:\tfrom all lookup local\n101:\tfrom 10.0.1.1 lookup 101\n"
            "32766:\tfrom all lookup main\n" + lo +
            "default via 10.0.1.254 dev client-eth0 table 101 \n"
            "10.0.1.0/24 dev client-eth0 proto kernel scope link src 10.0.1.1 \n" + lo +
            "@@testbed-hoststate addresses\n"
            "2: client-eth0    inet 10.0.1.1/24 brd 10.0.1.255 scope global client-eth0\n")
    st, old = parse_state(text), parse_state(TEXT)
    assert (st.limits, st.endpoints, st.rules, st.routes) == \
        (old.limits, old.endpoints, old.rules, old.routes)
    assert st.addresses == ["client-eth0 inet 10.0.1.1/24"]


def test_a_run_that_changed_nothing_needs_nothing():
    base = parse_state(TEXT)
    assert restore_commands(base, parse_state(TEXT)) == []
    assert differences(base, parse_state(TEXT)) == []


def test_what_an_mptcp_run_left_is_undone():
    base = parse_state(TEXT)
    now = parse_state(TEXT.replace("= cubic", "= reno")
                      .replace("4096\t131072\t6291456", "4096 65536 65536")
                      .replace("subflows 2", "subflows 8")
                      .replace("@@testbed-hoststate rules",
                               "10.0.2.1 id 1 subflow dev client-eth1\n"
                               "@@testbed-hoststate rules")
                      .replace("32766:", "102:\tfrom 10.0.2.1 lookup 102\n32766:")
                      + "10.0.2.0/24 dev client-eth1 table 102 scope link\n")
    assert restore_commands(base, now) == [
        ["sysctl", "-q", "-w", "net.ipv4.tcp_congestion_control=cubic",
         "net.ipv4.tcp_rmem=4096 131072 6291456"],
        ["ip", "mptcp", "endpoint", "flush"],
        ["ip", "mptcp", "limits", "set", "add_addr_accepted", "0", "subflows", "2"],
        ["ip", "rule", "del", "pref", "102", "from", "10.0.2.1", "lookup", "102"],
        ["ip", "route", "del", "10.0.2.0/24", "dev", "client-eth1", "table", "102",
         "scope", "link"]]
    diff = differences(base, now)
    assert len(diff) == 6 and any("MPTCP endpoints" in d for d in diff)


def test_a_rule_sharing_its_priority_with_a_baseline_rule_is_deleted_by_selector():
    # P0's subflows spec: an alias address's rule has its interface's priority (101)
    base = parse_state(TEXT)
    now = parse_state(TEXT.replace("101:\tfrom 10.0.1.1 lookup 101\n",
                                   "101:\tfrom 10.0.1.1 lookup 101\n"
                                   "101:\tfrom 10.0.1.52 lookup 101\n"))
    assert len(now.rules) == len(base.rules) + 1
    assert restore_commands(base, now) == [
        ["ip", "rule", "del", "pref", "101", "from", "10.0.1.52", "lookup", "101"]]


ADDRS = """@@testbed-hoststate addresses
1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
2: client-eth0    inet 10.0.1.1/24 brd 10.0.1.255 scope global client-eth0\\       valid_lft forever
"""


def test_an_address_the_run_added_is_deleted_with_its_kernel_routes():
    # P0 subflows on a kept network: the alias stayed, its local route was deleted as a
    # route the run added, and the next run's join subflow from it never got a SYN-ACK
    base = parse_state(TEXT + ADDRS)
    assert base.addresses == ["lo inet 127.0.0.1/8", "client-eth0 inet 10.0.1.1/24"]
    now = parse_state(TEXT + "local 10.0.1.52 dev client-eth0 table local proto kernel "
                      "scope host src 10.0.1.52\n" + ADDRS.replace(
                          "\n2:", "\n2: client-eth0    inet 10.0.1.52/24 scope global "
                          "secondary client-eth0\\   valid_lft forever\n2:"))
    assert differences(base, now)[-1] == "address added: client-eth0 inet 10.0.1.52/24"
    assert restore_commands(base, now) == [["ip", "addr", "del", "10.0.1.52/24", "dev",
                                            "client-eth0"]]


def test_what_a_run_removed_is_reported_not_recreated():
    base = parse_state(TEXT)
    now = parse_state(TEXT.replace("101:\tfrom 10.0.1.1 lookup 101\n", ""))
    assert restore_commands(base, now) == []
    assert differences(base, now) == ["rule gone: 101: from 10.0.1.1 lookup 101"]
    assert differences(HostState(), HostState()) == []


def test_sysctl_keys_are_found_without_reading_every_sysctl(tmp_path):
    for rel in ("net/ipv4/tcp_rmem", "net/ipv4/tcp_congestion_control", "net/mptcp/enabled",
                "net/core/rmem_max", "net/core/wmem_default", "net/core/somaxconn",
                "net/ipv4/conf/all/rp_filter", "net/ipv4/conf/eth0/rp_filter",
                "net/ipv4/ip_forward", "kernel/hostname",
                "net/ipv4/tcp_available_congestion_control",
                "net/ipv4/tcp_allowed_congestion_control"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("1\n")
    (tmp_path / "net/ipv4/tcp_available_congestion_control").chmod(0o444)
    assert sysctl_keys(tmp_path) == [
        "net.core.rmem_max", "net.core.wmem_default", "net.ipv4.conf.all.rp_filter",
        "net.ipv4.tcp_available_congestion_control", "net.ipv4.tcp_congestion_control",
        "net.ipv4.tcp_rmem", "net.mptcp.enabled"]
    assert "net.ipv4.tcp_available_congestion_control" not in sysctl_keys(tmp_path,
                                                                         writable=True)
    assert sysctl_keys(tmp_path / "none") == []
    # global, and changed by the testbed between runs (a registered coupled control is
    # listed there): never a run's leftover
    assert "net.ipv4.tcp_allowed_congestion_control" not in sysctl_keys(tmp_path)


def test_a_link_a_schedule_left_down_is_not_a_route_difference():
    """Routes over an interface without carrier are listed with "linkdown"; the link's
    state is put back by begin_run, so the host state is the same (P0's outage run)."""
    base = parse_state(TEXT)
    down = parse_state(TEXT.replace("dev client-eth0 table 101",
                                    "dev client-eth0 table 101 linkdown")
                       .replace("src 10.0.1.1\n", "src 10.0.1.1 linkdown\n"))
    assert down.routes == base.routes
    assert restore_commands(base, down) == [] and differences(base, down) == []


class _Host:
    """A host whose state is TEXT plus whatever the run added (a rule), until the batch
    of ``ip`` commands takes it away; records every process started."""

    name = "client"

    def __init__(self, extra: str) -> None:
        self.extra, self.calls = extra, []

    def run(self, argv, *, host=None, check=True, input=None, record=True, **_kw):
        from testbed.core.commands import Result

        self.calls.append((list(argv), input))
        if argv[:3] == ["ip", "-force", "-batch"]:
            self.extra = ""
        text = TEXT.replace("32766:", self.extra + "32766:")
        return Result(list(argv), 0, text if argv[0] == "sh" else "", "", 0.0)


def test_restore_runs_every_ip_command_in_one_batch_and_reads_once_when_clean():
    from testbed.net.hoststate import restore

    base = parse_state(TEXT)
    host = _Host("102:\tfrom 10.0.2.1 lookup 102\n103:\tfrom 10.0.3.1 lookup 103\n")
    assert restore(host, host, base, []) == []
    assert [argv[0] for argv, _i in host.calls] == ["sh", "ip", "sh"]
    assert host.calls[1][1] == ("rule del pref 102 from 10.0.2.1 lookup 102\n"
                                "rule del pref 103 from 10.0.3.1 lookup 103\n")
    clean = _Host("")
    assert restore(clean, clean, base, []) == []
    assert [argv[0] for argv, _i in clean.calls] == ["sh"]  # nothing to put back
