"""The pure parts of testbed.net.network: names, link groups, shaping changes, nft tables."""

from __future__ import annotations

from pathlib import Path

import pytest
from mininet.topo import Topo

from testbed.core.errors import InputError
from testbed.net import network as nw
from testbed.net.shaping import LinkShape
from topologies.multipath import MultiHomedTopo, PathSpec
from topologies.pair import PairTopo

DATA = Path(__file__).parents[1] / "data" / "network"
SHAPE = LinkShape(bw_bps=10_000_000, delay_s=0.01)


def test_parse_link_names_on_captured_output() -> None:
    names = nw.parse_link_names((DATA / "ip-o-link.txt").read_text())
    assert names == ["lo", "ifb0", "eth0", "ovs-system", "s1", "s1-eth1", "s1-eth2"]


def test_planned_links_follow_mininet_naming() -> None:
    topo = MultiHomedTopo(paths=[PathSpec("wifi", SHAPE), PathSpec("cell", SHAPE)])
    ends = {(i1, i2) for _n1, _n2, i1, i2, _ in nw.planned_links(topo)}
    assert ("client-eth1", "s2-eth1") in ends
    assert ("router-eth2", "server-eth0") in ends


def test_multipath_groups_shape_switch_ports_only() -> None:
    topo = MultiHomedTopo(paths=[PathSpec("wifi", SHAPE), PathSpec("cell", SHAPE)])
    groups = nw.link_groups(topo)
    assert sorted(groups) == ["cell", "wifi"]
    wifi = groups["wifi"]
    assert sorted(e.intf for e in wifi.egress) == ["s1-eth1", "s1-eth2"]
    assert all(not e.in_namespace for e in wifi.egress)
    assert sorted(e.intf for e in wifi.updown) == ["s1-eth1", "s1-eth2"]


def test_pair_topology_shapes_both_host_ends() -> None:
    groups = nw.link_groups(PairTopo(shape=SHAPE))
    link = groups["link"]
    assert [(e.node, e.intf, e.in_namespace) for e in link.egress] == [
        ("h1", "h1-eth0", True), ("h2", "h2-eth0", True)]
    assert [e.intf for e in link.updown] == ["h1-eth0"]  # no root-namespace end


class TCStyle(Topo):
    def build(self, **_opts) -> None:
        self.addHost("a")
        self.addSwitch("s9")
        self.addHost("b")
        self.addLink("a", "s9", bw=5, delay="20ms", loss=1, max_queue_size=50)
        self.addLink("s9", "b")


def test_tclink_style_options_are_shaped_and_named_by_nodes() -> None:
    groups = nw.link_groups(TCStyle())
    assert list(groups) == ["a-s9"]
    g = groups["a-s9"]
    assert g.shape == LinkShape(bw_bps=5_000_000, delay_s=0.02, loss_pct=1.0, queue_pkts=50)
    assert {e.intf for e in g.egress} == {"a-eth0", "s9-eth1"}
    assert [e.intf for e in g.updown] == ["s9-eth1"]


class BadEnds(Topo):
    def build(self, **_opts) -> None:
        self.addHost("a")
        self.addHost("b")
        self.addLink("a", "b", shape=SHAPE, shape_ends=("c",))


def test_shape_ends_must_be_link_ends() -> None:
    with pytest.raises(InputError, match="shape_ends"):
        nw.link_groups(BadEnds())


def test_unstarted_network_lookups_fail_clearly() -> None:
    net = nw.Network(PairTopo(shape=SHAPE))
    with pytest.raises(InputError, match="no shaped link named 'x'; this network has link"):
        net.link("x")
    with pytest.raises(InputError, match="no node"):
        net.host("h1")
    assert [p.intf for p in net.path_interfaces("link")] == ["h1-eth0", "h2-eth0"]
    assert net.path_interfaces("link")[0].addr == "10.0.0.1"
    with pytest.raises(InputError, match="no path named 'wifi'"):
        net.path_interfaces("wifi")


def test_controller_target_is_what_ovs_switch_reads() -> None:
    c = nw.ControllerTarget("c0", port=6699)
    assert (c.protocol, c.IP(), c.port) == ("tcp", "127.0.0.1", 6699)


def _dry_net(tmp_path: Path) -> nw.Network:
    from testbed.core.commands import CommandRunner

    topo = MultiHomedTopo(paths=[PathSpec("wifi", SHAPE), PathSpec("cell", SHAPE)])
    return nw.Network(topo, runner=CommandRunner(dry_run=True), workdir=tmp_path)


def test_apply_changes_only_with_qdisc_change(tmp_path: Path) -> None:
    from testbed.plan.schedule import LinkChange, ScheduleEvent

    net = _dry_net(tmp_path)
    net.apply(ScheduleEvent(1.0, "wifi", LinkChange(bw_bps=2_000_000, loss_pct=1.0)))
    argv = [e.argv for e in net.runner.transcript.entries]
    assert len(argv) == 4  # netem + tbf on each of s1-eth1, s1-eth2
    assert all(a[:4] == ["tc", "qdisc", "change", "dev"] and a[4].startswith("s1-eth")
               for a in argv)
    assert net.link("wifi").shape.bw_bps == 2_000_000
    assert net.link("cell").shape == SHAPE


def test_down_then_up_uses_ip_link_on_switch_ports(tmp_path: Path) -> None:
    from testbed.plan.schedule import LinkChange, ScheduleEvent

    net = _dry_net(tmp_path)
    net.apply(ScheduleEvent(1.0, "cell", LinkChange(up=False)))
    assert net.link("cell").up is False
    net.apply(ScheduleEvent(2.0, "cell", LinkChange(up=True, delay_s=0.07)))
    argv = [e.argv for e in net.runner.transcript.entries]
    # a delay change touches only the netem qdisc of each of the two ports
    assert [a[:2] for a in argv] == [["ip", "link"]] * 2 + [["tc", "qdisc"]] * 2 + [
        ["ip", "link"]] * 2
    assert argv[:2] == [["ip", "link", "set", "dev", "s2-eth1", "down"],
                        ["ip", "link", "set", "dev", "s2-eth2", "down"]]
    assert any("70000us" in a for a in argv[2])
    assert net.link("cell").up is True


def test_unchanged_event_runs_nothing(tmp_path: Path) -> None:
    from testbed.plan.schedule import LinkChange, ScheduleEvent

    net = _dry_net(tmp_path)
    net.apply(ScheduleEvent(1.0, "wifi", LinkChange(bw_bps=SHAPE.bw_bps, up=True)))
    assert net.runner.transcript.entries == []


def test_parse_nft_tables_and_split_qdisc_dump() -> None:
    assert nw.parse_nft_tables("table netdev spray_e0\ntable inet filter\n\n") == {
        ("netdev", "spray_e0"), ("inet", "filter")}
    # `tc -s qdisc show` of a namespace, as printed by iproute2 6.1
    text = ("qdisc noqueue 0: dev lo root refcnt 2 \n"
            " Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n"
            "qdisc netem 1: dev s1-eth1 root refcnt 2 limit 1000 delay 5ms\n"
            " Sent 1514 bytes 1 pkt (dropped 0, overlimits 0 requeues 0) \n"
            " backlog 0b 0p requeues 0\n"
            "qdisc tbf 2: dev s1-eth1 parent 1:1 rate 8Mbit burst 10000b lat 0us \n"
            " Sent 1514 bytes 1 pkt (dropped 0, overlimits 0 requeues 0) \n"
            "qdisc netem 1: dev s1-eth2 root refcnt 2 limit 1000 delay 5ms\n"
            " Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n")
    blocks = nw.split_qdisc_dump(text)
    assert set(blocks) == {"lo", "s1-eth1", "s1-eth2"}
    assert blocks["s1-eth1"].count("qdisc ") == 2 and "tbf 2:" in blocks["s1-eth1"]
    assert blocks["s1-eth2"].startswith("qdisc netem 1: dev s1-eth2")


def test_nft_tables_are_made_and_deleted_in_one_call_each(tmp_path: Path) -> None:
    net = _dry_net(tmp_path)
    net.add_nft_tables([("netdev", "spray_e0", "chain c {}"),
                        ("netdev", "spray_e1", "chain c {}")])
    assert net.manifest.nft_tables == [["netdev", "spray_e0"], ["netdev", "spray_e1"]]
    made = [e.argv for e in net.runner.transcript.entries]
    assert made == [["nft", "list", "tables"], ["nft", "-f", "-"]]
    net._delete_nft_tables()  # a dry runner lists no tables: nothing to delete
    assert [e.argv for e in net.runner.transcript.entries] == [*made, ["nft", "list", "tables"]]


def test_topology_setup_is_one_sysctl_and_one_ip_batch_per_host(tmp_path: Path,
                                                                 monkeypatch) -> None:
    from types import SimpleNamespace

    net = _dry_net(tmp_path)
    monkeypatch.setattr(net, "node", lambda name: SimpleNamespace(name=name, pid=7))
    cmds = [*net.topo.setup_commands(), ("router", ["echo", "other"])]
    net._run_setup_commands(cmds)
    got = [(e.where, e.argv[3:]) for e in net.runner.transcript.entries]
    # anything else first, then one sysctl per host, then the ip commands in their order
    assert got[0] == ("router", ["echo", "other"])
    sysctl_lines = [g for g in got if g[1][0] == "sysctl"]
    assert sysctl_lines == [("router", ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]),
                            ("client", ["sysctl", "-q", "-w",
                                        "net.ipv4.conf.all.rp_filter=2"])]
    ip_lines = [g for g in got if g[1][0] == "ip"]
    assert ip_lines == [(h, a) for h, a in cmds if a[0] == "ip"] and len(ip_lines) == 4
    assert got.index(sysctl_lines[-1]) < got.index(ip_lines[0])


def test_ctrl_c_during_cleanup_finishes_it_then_is_raised(tmp_path: Path) -> None:
    import os
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")
    before = signal.getsignal(signal.SIGINT)
    net = _dry_net(tmp_path)
    net._install_signal_handlers()
    done: list[str] = []

    def interrupted_step(name: str):
        def step() -> None:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, twice over the clean-up
            done.append(name)
        return step

    net._stop_players = interrupted_step("schedules")
    net._delete_nft_tables = interrupted_step("nftables")
    net._remove_leftovers = lambda: done.append("leftovers")
    with pytest.raises(KeyboardInterrupt):
        net.stop()
    assert done == ["schedules", "nftables", "leftovers"]  # nothing cut short
    assert net.cleanup_report["signals_during_cleanup"] == [str(int(signal.SIGINT))] * 2
    assert signal.getsignal(signal.SIGINT) is before
    net.stop()  # idempotent, nothing raised twice


def test_deferred_interrupt_kinds() -> None:
    import signal

    from testbed.net.cleanup import deferred_interrupt

    assert deferred_interrupt([]) is None
    assert isinstance(deferred_interrupt([str(int(signal.SIGINT))]), KeyboardInterrupt)
    exc = deferred_interrupt([int(signal.SIGTERM)])
    assert isinstance(exc, SystemExit) and exc.code == 143
