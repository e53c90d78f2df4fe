"""NetworkKeeper: which runs share a network, and what happens to it between and after."""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import pytest

from testbed import network as network_mod
from testbed.errors import RunError
from testbed.reuse import NetworkKeeper, reuse_key
from testbed.spec import validate_spec

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


class FakeNetwork:
    """Records the lifecycle calls the keeper makes."""

    made: ClassVar[list[FakeNetwork]] = []

    def __init__(self, topo: Any, runner: Any = None, controller: Any = None,
                 workdir: Any = None):
        self.calls: list[str] = []
        self.controller, self.workdir = controller, workdir
        self.cleanup_report: dict = {}
        self.cleanup_errors: list[str] = []
        self.fail_end = False
        FakeNetwork.made.append(self)

    def start(self) -> None:
        self.calls.append("start")

    def begin_run(self, runner: Any, controller: Any, workdir: Any) -> None:
        self.calls.append(f"begin {controller}")

    def end_run(self) -> None:
        self.calls.append("end")
        if self.fail_end:
            raise RunError("a process would not die")

    def stop(self) -> None:
        self.calls.append("stop")


@pytest.fixture
def fake_net(monkeypatch):
    FakeNetwork.made = []
    monkeypatch.setattr(network_mod, "Network", FakeNetwork)
    return FakeNetwork


def test_keeper_hands_the_network_on_and_stops_it_at_close(fake_net, tmp_path):
    with NetworkKeeper() as keeper:
        net, info = keeper.acquire(spec(), None, "r1", None, "ctl1", tmp_path / "1")
        assert info["reused"] is False and info["built_by"] == "r1"
        assert keeper.release(net, ok=True) == {"kept_for_next_run": True}
        net2, info = keeper.acquire(spec(controller__kind="ecmp"), None, "r2", None, "ctl2",
                                    tmp_path / "2")
        assert net2 is net and info["reused"] is True and info["built_by"] == "r1"
        assert info["runs_before"] == 1
        keeper.release(net2, ok=True)
    assert len(fake_net.made) == 1
    assert net.calls == ["start", "end", "begin ctl2", "end", "stop"]


def test_another_topology_or_a_failed_run_gets_a_fresh_network(fake_net, tmp_path):
    keeper = NetworkKeeper()
    net, _ = keeper.acquire(spec(), None, "r1", None, None, tmp_path)
    keeper.release(net, ok=True)
    other, info = keeper.acquire(spec(topology__bw="20Mbit"), None, "r2", None, None, tmp_path)
    assert other is not net and info["reused"] is False
    assert net.calls == ["start", "end", "stop"]          # the old one went first
    assert keeper.release(other, ok=False) == {}           # failed: stopped, not kept
    assert other.calls == ["start", "stop"] and keeper.net is None
    third, info = keeper.acquire(spec(topology__bw="20Mbit"), None, "r3", None, None, tmp_path)
    assert info["reused"] is False and third is not other


def test_a_network_that_cannot_be_cleaned_between_runs_is_stopped(fake_net, tmp_path):
    keeper = NetworkKeeper()
    net, _ = keeper.acquire(spec(), None, "r1", None, None, tmp_path)
    net.fail_end = True
    keeper.release(net, ok=True)
    assert net.calls == ["start", "end", "stop"] and keeper.net is None
    assert "reuse: a process would not die" in net.cleanup_errors


def test_fresh_networks_and_mptcp_runs_are_never_kept(fake_net, tmp_path):
    keeper = NetworkKeeper(keep=False)
    net, _ = keeper.acquire(spec(), None, "r1", None, None, tmp_path)
    keeper.release(net, ok=True)
    assert net.calls == ["start", "stop"]
    keeper = NetworkKeeper()
    net, _ = keeper.acquire(spec(transport__protocol="mptcp"), None, "r1", None, None,
                            tmp_path)
    keeper.release(net, ok=True)
    assert net.calls == ["start", "stop"]
