"""The launcher: argv, /proc/net/tcp parsing, readiness, CLI errors, and a real controller
process programming two fake OpenFlow 1.3 switches over loopback (no root needed)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from controllers import launcher, layout_for
from controllers.launcher import (
    ControllerProcess,
    controller_argv,
    inactivity_probe_argv,
    is_listening,
    parse_proc_net_tcp,
    parse_status,
    readiness,
)
from controllers.paths import compute_routes
from controllers.registry import UnknownAppError, app_module, canonical_app
from controllers.stats import chi2_sf, chi_square_uniform
from controllers.testing import (
    BARRIER_REQ,
    FLOW_MOD,
    GROUP_MOD,
    HELLO,
    OFP_HEADER,
    FakeSwitch,
    free_port,
)
from testbed.core.commands import CommandRunner
from testbed.core.errors import InputError, RunError
from topologies.fattree import FatTreeTopo, TopologyError, fattree_layout

DATA = Path(__file__).resolve().parents[1] / "data" / "controllers"


def test_controller_argv() -> None:
    assert controller_argv("/py", "ecmp", 6653, Path("/r/c.layout.json"),
                           Path("/r/c.status.jsonl")) == [
        "/py", "-m", "controllers", "ecmp", "--port", "6653",
        "--layout", "/r/c.layout.json", "--status", "/r/c.status.jsonl"]


def test_inactivity_probe_argv() -> None:
    assert inactivity_probe_argv(["E0", "A0"], 30000) == [
        "ovs-vsctl", "--timeout=60", "--", "set", "controller", "E0", "inactivity_probe=30000",
        "--", "set", "controller", "A0", "inactivity_probe=30000"]


def test_parse_proc_net_tcp() -> None:
    got = parse_proc_net_tcp((DATA / "proc_net_tcp.txt").read_text())
    assert got == {("0.0.0.0", 2024), ("127.0.0.1", 51035)}   # rows in state 0A only


def test_registry_and_layouts() -> None:
    assert canonical_app("single-path") == "single_path"
    assert app_module("spray") == "controllers.spray"
    with pytest.raises(UnknownAppError, match="choose one of single_path, ecmp, spray"):
        canonical_app("flowlet")
    assert layout_for("fattree,6").k == 6
    assert layout_for(FatTreeTopo(2)) == fattree_layout(2)
    assert layout_for(fattree_layout(4).to_dict()) == fattree_layout(4)
    with pytest.raises(TopologyError, match="no layout"):
        layout_for("multipath,2")
    with pytest.raises(TopologyError, match="even"):
        layout_for("fattree,5")


def test_readiness() -> None:
    events = parse_status(
        '{"t": 1.0, "event": "programming", "dpid": 1}\n'
        '{"t": 2.0, "event": "ready", "dpid": 1}\n'
        '{"t": 2.5, "event": "ready", "dpid": 2}\n'
        '{"t": 3.0, "event": "disconnected", "dpid": 2}\n'
        '{"t": 3.5, "event": "ready", "dpid": 9}\n'
        '{"t": 4.0, "event": "rea')            # a line still being written
    ready, errors = readiness(events, [1, 2])
    assert ready == {1: 2.0} and errors == []
    _, errors = readiness([{"event": "error", "dpid": 2, "detail": "x"}], [1, 2])
    assert len(errors) == 1


def test_constructor_rejects_bad_input(tmp_path: Path) -> None:
    with pytest.raises(UnknownAppError):
        ControllerProcess("nope", "fattree,4", log=tmp_path / "c.log")
    with pytest.raises(InputError, match="even"):
        ControllerProcess("ecmp", "fattree,3", log=tmp_path / "c.log")
    ctl = ControllerProcess("spray", FatTreeTopo(4), port=6999, log=tmp_path / "c.log")
    with pytest.raises(RunError, match="never started"):
        ctl.check_alive()


@pytest.mark.parametrize(("argv", "message"), [
    (["flowlet"], "unknown controller app 'flowlet'"),
    (["ecmp", "--topo", "fattree,3"], "k must be even"),
    (["ecmp", "--topo", "ring,3"], "no layout the controllers can route"),
])
def test_cli_user_errors_exit_2(argv: list[str], message: str) -> None:
    res = subprocess.run([sys.executable, "-m", "controllers", *argv], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr.startswith("error: ") and message in res.stderr
    assert "Traceback" not in res.stderr


def test_chi_square() -> None:
    # textbook critical values at p = 0.05 and 0.01
    assert chi2_sf(3.841459, 1) == pytest.approx(0.05, abs=1e-6)
    assert chi2_sf(5.991465, 2) == pytest.approx(0.05, abs=1e-6)
    assert chi2_sf(7.814728, 3) == pytest.approx(0.05, abs=1e-6)
    assert chi2_sf(13.276704, 4) == pytest.approx(0.01, abs=1e-6)
    assert chi2_sf(15.086272, 5) == pytest.approx(0.01, abs=1e-6)
    assert chi2_sf(0.0, 3) == 1.0
    stat, p = chi_square_uniform([4881, 4807])
    assert stat == pytest.approx(74**2 / 4844 / 2, rel=1e-9) and p > 0.4
    assert chi_square_uniform([900, 100])[1] < 1e-100
    with pytest.raises(ValueError):
        chi_square_uniform([5])


def test_controller_process_programs_switches_over_loopback(tmp_path: Path) -> None:
    layout = fattree_layout(4)
    port = free_port()
    runner = CommandRunner()
    ctl = ControllerProcess("ecmp", layout, port=port, log=tmp_path / "logs" / "ctl.log",
                            runner=runner, start_timeout=60)
    switches = []
    try:
        ctl.start()
        assert is_listening(port)
        e0, c0 = layout.switch("E0"), layout.switch("C0")
        switches = [FakeSwitch(port, e0.dpid, [1, 2, 3, 4, 0xFFFFFFFE]),
                    FakeSwitch(port, c0.dpid, [1, 2, 3, 4])]
        for sw in switches:
            sw.start()
        ready = ctl.wait_ready([e0.dpid, c0.dpid], timeout=30)
        assert set(ready) == {e0.dpid, c0.dpid}
        assert switches[0].counts[FLOW_MOD] == 1 + 1 + 16 + 16   # reset, miss, ARP, IPv4
        assert switches[0].counts[GROUP_MOD] == 2                # reset + one select group
        assert switches[1].counts == {FLOW_MOD: 18, GROUP_MOD: 1, BARRIER_REQ: 1}
        ctl.check_alive()
        assert ctl.describe()["app"] == "ecmp"
        # a switch with missing ports is reported and fails the wait loudly
        bad = FakeSwitch(port, layout.switch("A0").dpid, [1, 2])
        switches.append(bad)
        bad.start()
        with pytest.raises(RunError, match="lacks layout ports"):
            ctl.wait_ready([layout.switch("A0").dpid], timeout=30)
        # the controller dying mid-run is noticed
        assert ctl.proc is not None
        ctl.proc.popen.kill()
        ctl.proc.popen.wait(10)
        with pytest.raises(RunError, match="died"):
            ctl.check_alive()
    finally:
        for sw in switches:
            sw.close()
        ctl.stop()
    assert ctl.proc is not None and not ctl.proc.running()
    assert runner.running() == []
    status = [json.loads(x) for x in ctl.status_file.read_text().splitlines()]
    assert {e["switch"] for e in status if e["event"] == "ready"} >= {"E0", "C0"}
    assert [e["switch"] for e in status if e["event"] == "error"] == ["A0"]
    assert ctl.log.exists() and "instantiating app controllers.ecmp" in ctl.log.read_text()


class MuteOnceSwitch(FakeSwitch):
    """Ignores the features request on its first connection (as a stalled controller would
    leave it: connected, never programmed); when the controller has been restarted
    (``restarted`` set) it connects again and answers normally."""

    def __init__(self, port: int, dpid: int, ports: list[int]):
        super().__init__(port, dpid, ports)
        self.connections = 0
        self.restarted = threading.Event()

    def run(self) -> None:
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=0.5)
        self.connections = 1
        self.send(HELLO, 1)
        # The first connection normally ends when the old process dies; leaving it once the
        # restart is known keeps the test independent of when the EOF arrives (in about one
        # run in eight the client saw no EOF for several seconds, still unexplained).
        while not self.restarted.is_set():
            try:
                _v, _type, length, _xid = OFP_HEADER.unpack(self.recv_exact(8))
                self.recv_exact(length - 8)
            except TimeoutError:
                continue
            except (ConnectionError, OSError):
                break
        self.sock.close()
        self.restarted.wait(60)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
            except OSError:
                time.sleep(0.2)
                continue
            self.connections = 2
            self.serve()
            return


def test_a_stalled_controller_is_restarted_with_its_stacks_logged(tmp_path: Path) -> None:
    layout = fattree_layout(4)
    port = free_port()
    runner = CommandRunner()
    ctl = ControllerProcess("single_path", layout, port=port, log=tmp_path / "ctl.log",
                            runner=runner, start_timeout=60, stall_s=6.0, max_restarts=1)
    t_start = time.time()
    c0 = layout.switch("C0")
    sw = MuteOnceSwitch(port, c0.dpid, [1, 2, 3, 4])
    restart = ctl._restart_stalled

    def restart_and_tell(missing: list[str]) -> None:
        restart(missing)
        sw.restarted.set()

    ctl._restart_stalled = restart_and_tell  # type: ignore[method-assign]
    try:
        ctl.start()
        sw.start()
        # as in the runner, the timeout is no longer than the stall limit: the restarted
        # process still gets its own stall_s
        ready = ctl.wait_ready([c0.dpid], timeout=6.0)
        assert set(ready) == {c0.dpid} and sw.connections == 2
        assert [r["missing"] for r in ctl.restarts] == [["C0"]]
        assert ctl.describe()["restarts"] == ctl.restarts
        assert ctl.started_at is not None and ctl.started_at < t_start + 1  # the first start
        log = ctl.log.read_text()
        assert "Thread 0x" in log and "most recent call first" in log  # faulthandler
        assert log.count("instantiating app controllers.single_path") == 2
    finally:
        sw.close()
        ctl.stop()
    assert runner.running() == []


def test_stalls_beyond_the_restart_budget_time_out(tmp_path: Path) -> None:
    layout = fattree_layout(4)
    port = free_port()
    ctl = ControllerProcess("single_path", layout, port=port, log=tmp_path / "ctl.log",
                            start_timeout=60, stall_s=1.0, max_restarts=0)
    sw = FakeSwitch(port, layout.switch("C0").dpid, [1, 2, 3, 4])
    try:
        ctl.start()
        with pytest.raises(RunError, match=r"1 switches not programmed after 3s \(C1\).*"
                                           "thread stacks"):
            ctl.wait_ready([layout.switch("C1").dpid], timeout=3)
        assert ctl.restarts == []
    finally:
        sw.close()
        ctl.stop()


def test_port_in_use_is_refused(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        ctl = ControllerProcess("ecmp", "fattree,4", port=s.getsockname()[1],
                                log=tmp_path / "c.log")
        with pytest.raises(RunError, match="already in use"):
            ctl.start()
    assert ctl.proc is None


# The controller with os-ken's features handler slowed down: its receive thread queues the
# features event for the app, then sleeps before it sets ``dp.id``, as a receive thread that
# loses the CPU there does on a slow machine.  Then runs ``python -m controllers ARGS``.
SLOW_FEATURES = """
import functools, runpy, sys, time
from os_ken.controller import ofp_handler
slow = float(sys.argv[1])
orig = ofp_handler.OFPHandler.switch_features_handler
@functools.wraps(orig)
def switch_features_handler(self, ev):
    time.sleep(slow)
    orig(self, ev)
ofp_handler.OFPHandler.switch_features_handler = switch_features_handler
sys.argv = ["controllers", *sys.argv[2:]]
runpy.run_module("controllers", run_name="__main__", alter_sys=True)
"""


def test_twenty_switches_at_once_with_a_slow_receive_thread(tmp_path: Path, monkeypatch) -> None:
    """A k=4 fat-tree's 20 switches connect at once; every one is programmed although the
    app handles each features reply before os-ken has set the datapath's id (the stall seen
    in the VM: the handler raised on ``dp.id`` None and the native hub silently ended the
    app's event thread after a few switches)."""
    def slow_argv(python: str, *args: Any) -> list[str]:
        return [python, "-c", SLOW_FEATURES, "0.3", *controller_argv(python, *args)[3:]]

    monkeypatch.setattr(launcher, "controller_argv", slow_argv)
    layout = fattree_layout(4)
    port = free_port()
    runner = CommandRunner()
    ctl = ControllerProcess("ecmp", layout, port=port, log=tmp_path / "ctl.log", runner=runner,
                            start_timeout=60, stall_s=600, max_restarts=0)
    adj = compute_routes(layout).adj
    switches = [FakeSwitch(port, sw.dpid, sorted(adj.ports[sw.name]))
                for sw in layout.switches]
    try:
        ctl.start()
        for sw in switches:
            sw.start()
        ready = ctl.wait_ready([sw.dpid for sw in layout.switches], timeout=30)
        assert len(ready) == 20 and ctl.restarts == []
        assert all(sw.counts[BARRIER_REQ] == 1 for sw in switches)
        ctl.check_alive()
    finally:
        for sw in switches:
            sw.close()
        ctl.stop()
    assert runner.running() == []
    log = ctl.log.read_text()
    assert "Exception occurred" not in log and "Traceback" not in log


# The controller with a fabric app whose features handler raises on the first switch.
FIRST_FEATURES_FAIL = """
import functools, runpy, sys
from controllers.base import FabricApp
orig = FabricApp.on_switch_features
calls = []
@functools.wraps(orig)
def on_switch_features(self, ev):
    calls.append(ev)
    if len(calls) == 1:
        raise RuntimeError("injected handler failure")
    orig(self, ev)
FabricApp.on_switch_features = on_switch_features
sys.argv = ["controllers", *sys.argv[1:]]
runpy.run_module("controllers", run_name="__main__", alter_sys=True)
"""


def test_a_failing_handler_is_logged_and_the_app_goes_on(tmp_path: Path, monkeypatch) -> None:
    """With os-ken's native hub an exception in a handler used to end the app's event
    thread without a word (`controllers.hubfix`); now it is logged and the other switches
    are still programmed."""
    def failing_argv(python: str, *args: Any) -> list[str]:
        return [python, "-c", FIRST_FEATURES_FAIL, *controller_argv(python, *args)[3:]]

    monkeypatch.setattr(launcher, "controller_argv", failing_argv)
    layout = fattree_layout(4)
    port = free_port()
    ctl = ControllerProcess("single_path", layout, port=port, log=tmp_path / "ctl.log",
                            start_timeout=60, stall_s=600, max_restarts=0)
    adj = compute_routes(layout).adj
    switches = [FakeSwitch(port, sw.dpid, sorted(adj.ports[sw.name]))
                for sw in layout.switches]
    try:
        ctl.start()
        for sw in switches:
            sw.start()
        deadline = time.time() + 30
        ready: dict[int, float] = {}
        while len(ready) < 19 and time.time() < deadline:
            ready, _ = readiness(parse_status(ctl.status_file.read_text()),
                                 [sw.dpid for sw in layout.switches])
            time.sleep(0.1)
        assert len(ready) == 19, f"only {len(ready)} of 19 switches programmed"
        ctl.check_alive()
    finally:
        for sw in switches:
            sw.close()
        ctl.stop()
    log = ctl.log.read_text()
    assert "Exception occurred during handler processing" in log
    assert "RuntimeError: injected handler failure" in log
