"""NetworkKeeper: which runs share a network, and what happens to it between and after."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from testbed.core.errors import RunError
from testbed.net import cleanup as cleanup_mod
from testbed.net import network as network_mod
from testbed.run.reuse import KEPT, TEARDOWN, NetworkKeeper, reuse_key, topology_key
from testbed.spec.load import validate_spec

FATTREE = {
    "name": "ft", "duration": "5s",
    "topology": {"kind": "fattree", "k": 4, "bw": "10Mbit"},
    "controller": {"kind": "spray"},
    "transport": {"protocol": "tcp", "cc": "reno"},
    "workload": [{"kind": "bulk", "src": "S0", "dst": "S15", "size": "1MB"}],
}


def spec(**changes: Any) -> Any:
    data = copy.deepcopy(FATTREE)
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            data[section][field] = value
        else:
            data[section] = value
    return validate_spec(data, "test")


def test_runs_differing_in_controller_or_workload_share_a_network():
    base = reuse_key(spec())
    assert base is not None
    assert reuse_key(spec(controller__kind="ecmp")) == base
    assert reuse_key(spec(workload=[{"kind": "bulk", "src": "S1", "dst": "S14",
                                     "size": "2MB"}])) == base
    assert reuse_key(spec(duration="9s")) == base


def test_topology_or_transport_changes_need_another_network():
    base = reuse_key(spec())
    assert reuse_key(spec(topology__bw="20Mbit")) != base
    assert reuse_key(spec(transport__cc="cubic")) != base


def test_mptcp_and_schedules_never_share():
    assert reuse_key(spec(transport__protocol="mptcp")) is None
    assert reuse_key(spec(workload=[{"kind": "bulk", "src": "S0", "dst": "S15",
                                     "size": "1MB", "protocol": "mptcp"}])) is None
    sched = spec(schedule=[{"at": "1s", "link": "E0-A0", "bw": "5Mbit"}])
    assert reuse_key(sched) is None


class FakeManifest:
    def write(self, path: Path) -> None:
        path.write_text('{"bridges": ["E0"]}')


class FakeNetwork:
    """Records the lifecycle calls the keeper makes; can fail between runs or at stop."""

    made: ClassVar[list[FakeNetwork]] = []

    def __init__(self, topo: Any, runner: Any = None, controller: Any = None,
                 workdir: Any = None, baseline_hosts: bool = False, rps: bool = True):
        self.calls: list[str] = []
        self.baseline_hosts = baseline_hosts
        self.rps = rps
        self.rps_mask = "3" if rps else None
        self.runner, self.controller, self.workdir = runner, controller, workdir
        self.manifest = FakeManifest()
        self.cleanup_report: dict = {}
        self.cleanup_errors: list[str] = []
        self.fail_end: BaseException | None = None
        self.stop_error: str | None = None
        FakeNetwork.made.append(self)

    def start(self) -> None:
        self.calls.append("start")

    def begin_run(self, runner: Any, controller: Any, workdir: Any) -> None:
        self.calls.append(f"begin {controller}")

    def end_run(self) -> None:
        self.calls.append("end")
        if self.fail_end is not None:
            raise self.fail_end

    def stop(self) -> None:
        self.calls.append(f"stop via {self.runner}")
        if self.stop_error:
            self.cleanup_errors.append(self.stop_error)


@pytest.fixture
def fake_net(monkeypatch):
    FakeNetwork.made = []
    monkeypatch.setattr(network_mod, "Network", FakeNetwork)
    return FakeNetwork


def test_keeper_hands_the_network_on_and_stops_it_at_close(fake_net, tmp_path):
    with NetworkKeeper(state_dir=tmp_path) as keeper:
        net, info = keeper.acquire(spec(), None, "r1", "run1", "ctl1", tmp_path / "1")
        assert info["reused"] is False and info["built_by"] == "r1"
        assert keeper.release(net, ok=True) == {"kept_for_next_run": True}
        assert (tmp_path / KEPT).exists()  # a killed process leaves it to be cleaned up
        net2, info = keeper.acquire(spec(controller__kind="ecmp"), None, "r2", "run2",
                                    "ctl2", tmp_path / "2")
        assert net2 is net and info["reused"] is True and info["built_by"] == "r1"
        assert info["runs_before"] == 1 and not (tmp_path / KEPT).exists()
        keeper.release(net2, ok=True)
    assert len(fake_net.made) == 1
    assert net.calls == ["start", "end", "begin ctl2", "end", "stop via run1"]
    assert json.loads((tmp_path / TEARDOWN).read_text()) == {}
    assert not (tmp_path / KEPT).exists()


def test_another_topology_or_a_failed_run_gets_a_fresh_network(fake_net, tmp_path):
    keeper = NetworkKeeper()
    net, _ = keeper.acquire(spec(), None, "r1", "run1", None, tmp_path)
    keeper.release(net, ok=True)
    other, info = keeper.acquire(spec(topology__bw="20Mbit"), None, "r2", "run2", None,
                                 tmp_path)
    assert other is not net and info["reused"] is False
    # the old network went first, its commands in the new run's transcript
    assert net.calls == ["start", "end", "stop via run2"]
    assert info["previous_network_teardown"] == {}
    assert keeper.release(other, ok=False) == {}           # failed: stopped, not kept
    assert other.calls == ["start", "stop via run2"] and keeper.net is None
    third, info = keeper.acquire(spec(topology__bw="20Mbit"), None, "r3", "run3", None,
                                 tmp_path)
    assert info["reused"] is False and third is not other


def test_a_network_that_cannot_be_cleaned_between_runs_is_stopped(fake_net, tmp_path):
    keeper = NetworkKeeper()
    net, _ = keeper.acquire(spec(), None, "r1", "run1", None, tmp_path)
    net.fail_end = RunError("a process would not die")
    report = keeper.release(net, ok=True)  # the stop itself went well: the run stands
    assert net.calls == ["start", "end", "stop via run1"] and keeper.net is None
    assert report["errors"] == ["could not be made ready for another run: a process would "
                                "not die"]


def test_clean_up_errors_fail_a_run_that_went_well(fake_net, tmp_path):
    keeper = NetworkKeeper(keep=False)
    net, _ = keeper.acquire(spec(), None, "r1", "run1", None, tmp_path)
    net.stop_error = "links: veth S0-eth0 would not go"
    with pytest.raises(RunError, match="clean-up had errors: links: veth S0-eth0"):
        keeper.release(net, ok=True)
    net, _ = keeper.acquire(spec(), None, "r2", "run2", None, tmp_path)
    net.stop_error = "links: gone"
    assert keeper.release(net, ok=False)["errors"] == ["links: gone"]  # already failed


def test_an_interrupt_between_runs_stops_the_network(fake_net, tmp_path):
    keeper = NetworkKeeper()
    net, _ = keeper.acquire(spec(), None, "r1", "run1", None, tmp_path)
    net.fail_end = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        keeper.release(net, ok=True)
    assert net.calls == ["start", "end", "stop via run1"] and keeper.net is None
    keeper.close()
    assert net.calls.count("stop via run1") == 1


def test_a_network_a_killed_process_kept_is_removed_first(fake_net, tmp_path, monkeypatch):
    (tmp_path / KEPT).write_text('{"bridges": ["E0"]}')
    seen = []
    monkeypatch.setattr(cleanup_mod, "cleanup_from_manifest",
                        lambda path, runner: seen.append(path) or {"bridges": ["E0"]})
    keeper = NetworkKeeper(state_dir=tmp_path)
    _net, info = keeper.acquire(spec(), None, "r1", "run1", None, tmp_path)
    assert seen == [tmp_path / KEPT] and not (tmp_path / KEPT).exists()
    assert info["recovered_kept_network"] == {"bridges": ["E0"]}
    _net2, info = keeper.acquire(spec(topology__bw="20Mbit"), None, "r2", "run2", None,
                                 tmp_path)
    assert "recovered_kept_network" not in info and len(seen) == 1


def test_fresh_networks_and_mptcp_runs_on_big_networks_are_never_kept(fake_net, tmp_path):
    keeper = NetworkKeeper(keep=False)
    net, _ = keeper.acquire(spec(), None, "r1", "run1", None, tmp_path)
    keeper.release(net, ok=True)
    assert net.calls == ["start", "stop via run1"]
    keeper = NetworkKeeper()
    net, _ = keeper.acquire(spec(transport__protocol="mptcp"), None, "r1", "run1", None,
                            tmp_path)
    keeper.release(net, ok=True)
    assert net.calls == ["start", "stop via run1"]


MULTIPATH = {
    "name": "mp", "duration": "5s",
    "topology": {"kind": "multipath", "paths": [{"name": "wifi", "bw": "4Mbit"},
                                                 {"name": "cell", "bw": "4Mbit"}]},
    "transport": {"protocol": "mptcp", "cc": "cubic"},
    "workload": [{"kind": "bulk", "src": "client", "dst": "server"}],
}


class SmallTopo:
    """What the keeper asks of a topology: its hosts."""

    def __init__(self, n: int = 3):
        self.n = n

    def hosts(self) -> list[str]:
        return [f"h{i}" for i in range(self.n)]


def mp(**changes: Any) -> Any:
    data = copy.deepcopy(MULTIPATH)
    data.update(changes)
    return validate_spec(data, "test")


def test_topology_key_ignores_transport_and_schedules_but_not_foreign_sysctls():
    base = topology_key(mp())
    assert base is not None
    assert topology_key(mp(transport={"protocol": "tcp", "cc": "reno",
                                      "rmem": "64KiB"})) == base
    assert topology_key(mp(transport={"protocol": "mptcp",
                                      "sysctl": {"net.ipv4.tcp_sack": 0}})) == base
    assert topology_key(mp(transport={"protocol": "mptcp",
                                      "sysctl": {"net.core.default_qdisc": "fq"}})) is None
    assert topology_key(mp(schedule=[{"at": "1s", "link": "wifi", "down": True}])) == base
    assert topology_key(mp(topology={"kind": "multipath", "paths": [
        {"name": "wifi", "bw": "4Mbit"}]})) != base


def test_a_small_network_with_a_baseline_serves_runs_of_any_transport(fake_net, tmp_path):
    keeper = NetworkKeeper()
    net, info = keeper.acquire(mp(), SmallTopo(), "r1", "run1", None, tmp_path)
    assert net.baseline_hosts is True and info["reused"] is False
    assert keeper.release(net, ok=True) == {"kept_for_next_run": True}
    tcp = mp(transport={"protocol": "tcp", "cc": "reno"},
             workload=[{"kind": "bulk", "src": "client", "dst": "server", "via": "wifi"}])
    net2, info = keeper.acquire(tcp, SmallTopo(), "r2", "run2", None, tmp_path)
    assert net2 is net and info["reused"] is True
    keeper.release(net2, ok=True)
    sched = mp(schedule=[{"at": "1s", "link": "wifi", "down": True}])
    net3, info = keeper.acquire(sched, SmallTopo(), "r3", "run3", None, tmp_path)
    assert net3 is net and info["reused"] is True  # begin_run restores the links
    keeper.release(net3, ok=True)
    foreign = mp(transport={"protocol": "mptcp", "sysctl": {"net.core.default_qdisc": "fq"}})
    net4, info = keeper.acquire(foreign, SmallTopo(), "r4", "run4", None, tmp_path)
    assert net4 is not net and info["reused"] is False and net4.baseline_hosts is False
    assert net.calls == ["start", "end", "begin None", "end", "begin None", "end",
                         "stop via run4"]
    assert keeper.release(net4, ok=True) != {"kept_for_next_run": True}


def test_without_a_baseline_an_mptcp_network_is_not_kept(fake_net, tmp_path):
    keeper = NetworkKeeper()
    net, _ = keeper.acquire(mp(), SmallTopo(16), "r1", "run1", None, tmp_path)
    assert net.baseline_hosts is False
    keeper.release(net, ok=True)
    assert net.calls == ["start", "stop via run1"]
