"""FlowRun end to end on loopback (no root): the runner ignores ``host=`` here, so the
real flow-tool server, sink and client processes run in this namespace."""

from __future__ import annotations

import json
import signal
import socket
from dataclasses import dataclass
from pathlib import Path

from testbed.core.commands import CommandRunner
from testbed.host.traffic.flows import FlowRun
from testbed.plan import patterns
from testbed.plan.flows import resolve_flows


class LocalRunner(CommandRunner):
    def run(self, argv, *, host=None, **kw):
        return super().run(argv, **kw)

    def spawn(self, argv, *, host=None, **kw):
        return super().spawn(argv, **kw)


@dataclass
class Host:
    name: str
    pid: int = 0


def free_port_base() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_flowrun_collects_one_record_per_flow(tmp_path: Path) -> None:
    runner = LocalRunner()
    flows = (patterns.incast("inc", ["a", "b"], "c", 100_000)
             + patterns.cbr("cbr", "a", "c", 400_000, packet_size=500, duration=0.3)
             + patterns.one_to_one("late", "b", "c", size=10, start=60.0))
    flows = resolve_flows(flows, {"c": "127.0.0.1"})
    hosts = {n: Host(n) for n in "abc"}
    fr = FlowRun(runner, hosts, flows, tmp_path / "samples", tmp_path / "logs",
                 base_port=free_port_base())
    try:
        fr.start()
        assert not fr.wait(timeout=2)  # "late" starts after 60 s
    finally:
        fr.stop()
    recs = {r["flow_id"]: r for r in fr.collect()}
    assert set(recs) == {"inc-0", "inc-1", "cbr-0", "late-0"}
    assert recs["inc-0"]["bytes_received"] == 100_000 and recs["inc-1"]["error"] is None
    assert recs["cbr-0"]["protocol"] == "udp" and recs["cbr-0"]["packets"] > 20
    assert recs["late-0"]["error"] == "interrupted before it started"
    lines = (tmp_path / "samples" / "flows.jsonl").read_text().splitlines()
    assert len(lines) == 4 and all(json.loads(x)["flow_id"] in recs for x in lines)
    srv = fr.server_records()
    assert sum(r["bytes"] for r in srv if r["event"] == "flow") == 200_000
    assert [r["packets"] for r in srv if r["event"] == "udp"] == [recs["cbr-0"]["packets"]]
    assert not runner.running()


def test_spawned_clients_wait_for_release(tmp_path: Path) -> None:
    """`spawn` returns at once; after `wait_ready` every server listens and every client
    is ready, and nothing is sent before `release`."""
    runner = LocalRunner()
    flows = resolve_flows(patterns.one_to_one("one", "a", "b", size=20_000), {"b": "127.0.0.1"})
    fr = FlowRun(runner, {n: Host(n) for n in "ab"}, flows, tmp_path / "samples",
                 tmp_path / "logs", base_port=free_port_base())
    try:
        fr.spawn()
        fr.wait_ready()
        port = fr.servers[("b", "tcp")]
        assert '"listening"' in (tmp_path / "logs" / f"flowtool-server-b-{port}.out").read_text()
        assert '"ready"' in (tmp_path / "logs" / "flowtool-client-a.out").read_text()
        assert not (tmp_path / "logs" / "flows-a.jsonl").exists()  # held back until t0
        fr.release()
        assert fr.wait(timeout=30)
    finally:
        fr.stop()
    (rec,) = fr.collect()
    assert rec["error"] is None and rec["bytes_received"] == 20_000
    assert not runner.running()


def test_servers_spawned_to_listen_later_open_no_socket_before_listen(tmp_path: Path
                                                                       ) -> None:
    """With ``listen_later`` a server starts but opens no socket until `listen` (a run
    starts the flow tools before it configures the hosts, whose settings a listening
    socket takes when it is opened); a server stopped before `listen` exits cleanly."""
    runner = LocalRunner()
    base = free_port_base()
    flows = resolve_flows(patterns.one_to_one("one", "a", "b", size=20_000)
                          + patterns.cbr("cbr", "a", "b", 100_000, packet_size=200,
                                         duration=0.2), {"b": "127.0.0.1"})
    fr = FlowRun(runner, {n: Host(n) for n in "ab"}, flows, tmp_path / "samples",
                 tmp_path / "logs", base_port=base)
    try:
        fr.spawn(listen_later=True)
        # both Python processes are up (the client says ready) and still the server
        # listens nowhere: a connection to its port is refused
        from testbed.host.traffic.flows import _wait_for_lines
        _wait_for_lines([(p, tmp_path / "logs" / f"flowtool-client-{s}.out")
                         for s, p in fr._clients.items()], '"ready"', 60)
        port = fr.servers[("b", "tcp")]
        out = tmp_path / "logs" / f"flowtool-server-b-{port}.out"
        assert not (out.exists() and out.read_text())
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0
        fr.listen()
        fr.wait_ready()
        assert '"listening"' in out.read_text()
        fr.release()
        assert fr.wait(timeout=30)
    finally:
        fr.stop()
    recs = {r["flow_id"]: r for r in fr.collect()}
    assert recs["one-0"]["error"] is None and recs["one-0"]["bytes_received"] == 20_000
    assert recs["cbr-0"]["error"] is None and recs["cbr-0"]["packets"] > 0
    assert not runner.running()

    never = FlowRun(runner, {n: Host(n) for n in "ab"}, flows, tmp_path / "s2",
                    tmp_path / "l2", base_port=base + 10)
    never.spawn(listen_later=True)
    never.stop()
    assert never.stopped and not runner.running()
    # 0: it stopped waiting for `listen`; -SIGTERM: it was stopped before Python had set
    # up its signal handlers; never -SIGKILL (it did not hang)
    assert {p.popen.returncode for p, _out in never._servers} <= {0, -signal.SIGTERM}
