"""testbed.net.network and the parts it is made of, without a network: lookups, shaping
changes through a dry runner, nft tables, set-up commands, the clean-up's signals."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testbed.core.errors import InputError
from testbed.net import network as nw
from testbed.spec.linkshape import LinkShape
from testbed.spec.model import PathSpec
from topologies.multipath import MultiHomedTopo
from topologies.pair import PairTopo

SHAPE = LinkShape(bw_bps=10_000_000, delay_s=0.01)
PATHS = [PathSpec(name=n, bw=10_000_000, delay=0.01) for n in ("wifi", "cell")]  # as SHAPE


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
    from testbed.net.mininet_net import ControllerTarget

    c = ControllerTarget("c0", port=6699)
    assert (c.protocol, c.IP(), c.port) == ("tcp", "127.0.0.1", 6699)


def _dry_net(tmp_path: Path) -> nw.Network:
    from testbed.core.recording import RecordingRunner

    topo = MultiHomedTopo(paths=PATHS)
    return nw.Network(topo, runner=RecordingRunner(), workdir=tmp_path)


def test_apply_changes_only_with_qdisc_change(tmp_path: Path) -> None:
    from testbed.spec.model import ScheduleEvent

    net = _dry_net(tmp_path)
    net.apply(ScheduleEvent(at=1.0, link="wifi", bw=2_000_000, loss=1.0))
    argv = [e.argv for e in net.runner.transcript.entries if e.kind != "batch"]
    assert len(argv) == 4  # netem + tbf on each of s1-eth1, s1-eth2
    assert all(a[:4] == ["tc", "qdisc", "change", "dev"] and a[4].startswith("s1-eth")
               for a in argv)
    assert net.link("wifi").shape.bw_bps == 2_000_000
    assert net.link("cell").shape == SHAPE


def test_down_then_up_uses_ip_link_on_switch_ports(tmp_path: Path) -> None:
    from testbed.spec.model import ScheduleEvent

    net = _dry_net(tmp_path)
    net.apply(ScheduleEvent(at=1.0, link="cell", down=True))
    assert net.link("cell").up is False
    net.apply(ScheduleEvent(at=2.0, link="cell", down=False, delay=0.07))
    argv = [e.argv for e in net.runner.transcript.entries if e.kind != "batch"]
    # a delay change touches only the netem qdisc of each of the two ports
    assert [a[:2] for a in argv] == [["ip", "link"]] * 2 + [["tc", "qdisc"]] * 2 + [
        ["ip", "link"]] * 2
    assert argv[:2] == [["ip", "link", "set", "dev", "s2-eth1", "down"],
                        ["ip", "link", "set", "dev", "s2-eth2", "down"]]
    assert any("70000us" in a for a in argv[2])
    assert net.link("cell").up is True


def test_unchanged_event_runs_nothing(tmp_path: Path) -> None:
    from testbed.spec.model import ScheduleEvent

    net = _dry_net(tmp_path)
    assert net.apply(ScheduleEvent(at=1.0, link="wifi", bw=SHAPE.bw_bps, down=False)) is False
    assert net.runner.transcript.entries == []
    assert net.apply(ScheduleEvent(at=2.0, link="wifi", bw=2_000_000)) is True


def test_an_event_that_changed_nothing_is_no_handoff() -> None:
    """A trace row repeating the link's rate was passed to the hand-over notifier, which
    restarted every sender at a window of 1 for nothing."""
    from testbed.net import schedule as sc
    from testbed.spec.model import ScheduleEvent

    after: list[float] = []
    events = [ScheduleEvent(at=0.0, link="x", bw=1_000_000),
              ScheduleEvent(at=0.01, link="x", bw=1_000_000),
              ScheduleEvent(at=0.02, link="x", bw=2_000_000)]
    seen: list[int] = []

    def apply(ev: ScheduleEvent) -> bool:
        changed = ev.bw not in seen
        seen.append(ev.bw)
        return changed

    player = sc.SchedulePlayer(apply, events, time.time(), after=lambda ev: after.append(ev.at))
    player.start().join(5)
    assert after == [0.0, 0.02] and len(player.applied) == 3


def test_parse_nft_tables_and_split_qdisc_dump() -> None:
    from testbed.net.linkstate import split_qdisc_dump
    from testbed.net.nftables import parse_nft_tables

    assert parse_nft_tables("table netdev spray_e0\ntable inet filter\n\n") == {
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
    blocks = split_qdisc_dump(text)
    assert set(blocks) == {"lo", "s1-eth1", "s1-eth2"}
    assert blocks["s1-eth1"].count("qdisc ") == 2 and "tbf 2:" in blocks["s1-eth1"]
    assert blocks["s1-eth2"].startswith("qdisc netem 1: dev s1-eth2")


def test_nft_tables_are_made_and_deleted_in_one_call_each(tmp_path: Path) -> None:
    from testbed.net import nftables

    net = _dry_net(tmp_path)
    net.add_nft_tables([("netdev", "spray_e0", "chain c {}"),
                        ("netdev", "spray_e1", "chain c {}")])
    assert net.manifest.nft_tables == [["netdev", "spray_e0"], ["netdev", "spray_e1"]]
    made = [e.argv for e in net.runner.transcript.entries]
    assert made == [["nft", "-f", "-"]]  # the ``nft list tables`` before it is not recorded
    nftables.delete_tables(net.runner, net.record)  # a runner that answers nothing: no tables
    assert [e.argv for e in net.runner.transcript.entries] == made
    assert net.manifest.nft_tables == []


def test_topology_setup_is_one_sysctl_and_one_ip_batch_per_host(tmp_path: Path,
                                                                 ) -> None:
    from types import SimpleNamespace

    from testbed.net.bringup import run_setup_commands
    from testbed.net.linkstate import BatchShells

    net = _dry_net(tmp_path)

    def node(name: str) -> SimpleNamespace:
        return SimpleNamespace(name=name, pid=7)
    cmds = [*net.topo.setup_commands(), ("router", ["echo", "other"])]
    run_setup_commands(net.runner, cmds, node, BatchShells(node).run)
    got = [(e.where, e.argv[3:]) for e in net.runner.transcript.entries if e.kind != "batch"]
    # anything else first, then one sysctl per host, then the ip commands in their order
    assert got[0] == ("router", ["echo", "other"])
    sysctl_lines = [g for g in got if g[1][0] == "sysctl"]
    assert sysctl_lines == [("router", ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]),
                            ("client", ["sysctl", "-q", "-w",
                                        "net.ipv4.conf.all.rp_filter=2"])]
    ip_lines = [g for g in got if g[1][0] == "ip"]
    assert ip_lines == [(h, a) for h, a in cmds if a[0] == "ip"] and len(ip_lines) == 4
    assert got.index(sysctl_lines[-1]) < got.index(ip_lines[0])


def test_ctrl_c_during_cleanup_finishes_it_then_is_raised(tmp_path: Path, monkeypatch) -> None:
    import os
    import signal
    import threading

    from testbed.net import nftables

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")
    before = signal.getsignal(signal.SIGINT)
    net = _dry_net(tmp_path)
    net.teardown.install_signal_handlers()
    done: list[str] = []

    def interrupted_step(name: str):
        def step() -> None:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, twice over the clean-up
            done.append(name)
        return step

    monkeypatch.setattr(net.link_state, "stop_players", interrupted_step("schedules"))
    monkeypatch.setattr(nftables, "delete_tables",
                        lambda *_a: interrupted_step("nftables")())
    monkeypatch.setattr(net.teardown, "remove_leftovers", lambda *_a: done.append("leftovers"))
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
