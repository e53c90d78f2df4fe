"""The flow tool (server, sink, client, command line) over loopback (no root): TCP flows
of a size and a duration, a UDP CBR flow into a sink, refused connections, and
interruption writing a record per flow."""

from __future__ import annotations

import io
import json
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from testbed.host.traffic import flowclient, flowserver, flowsockets, flowtool
from testbed.plan.flowspec import FlowSpec, dump_flows, read_records


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tmp_path: Path
                 ) -> tuple[int, threading.Event, threading.Thread, flowsockets.JsonLines]:
    """A TCP flow server on loopback, listening: its port, stop event, thread and log."""
    port = free_port()
    stop = threading.Event()
    log = flowsockets.JsonLines(str(tmp_path / "srv.jsonl"))
    ready = io.StringIO()
    t = threading.Thread(target=flowserver.serve, args=("127.0.0.1", port, "tcp", log, stop,
                                                      ready), daemon=True)
    t.start()
    deadline = time.time() + 5
    while "listening" not in ready.getvalue() and time.time() < deadline:
        time.sleep(0.01)
    return port, stop, t, log


@pytest.fixture
def server(tmp_path: Path):
    port, stop, t, log = start_server(tmp_path)
    yield port, tmp_path / "srv.jsonl"
    stop.set()
    t.join(timeout=5)
    log.close()


def flow(port: int, **kw) -> FlowSpec:
    base = {"flow_id": "f0", "workload": "w", "src": "a", "dst": "b", "dst_addr": "127.0.0.1",
            "dport": port}
    return FlowSpec(**{**base, **kw})


def test_sized_flow_record(server) -> None:
    port, srv_log = server
    rec = flowclient.run_stream_flow(flow(port, size_bytes=300_000), threading.Event())
    assert rec["error"] is None
    assert rec["bytes"] == rec["bytes_received"] == 300_000
    assert rec["start"] <= rec["t_connected"] <= rec["end"]
    assert rec["fct_s"] == pytest.approx(rec["end"] - rec["start"])
    assert rec["src_addr"] == "127.0.0.1" and rec["sport"] > 0 and rec["dport"] == port
    time.sleep(0.1)
    (srv,) = read_records(srv_log.read_text())
    assert srv["bytes"] == 300_000 and srv["peer_port"] == rec["sport"]


def test_duration_flow_and_per_socket_cc(server) -> None:
    port, _ = server
    rec = flowclient.run_stream_flow(flow(port, duration_s=0.3, cc="reno"), threading.Event())
    assert rec["error"] is None, rec
    assert 0.3 <= rec["end"] - rec["t_connected"] < 2.0
    assert rec["bytes"] == rec["bytes_received"] > 0


def test_refused_connection_is_an_error_record() -> None:
    rec = flowclient.run_stream_flow(flow(free_port(), size_bytes=10), threading.Event())
    assert rec["error"].startswith("ConnectionRefusedError")
    assert rec["fct_s"] is None and rec["end"] is not None


def test_scheduled_flows_and_interruption(server, tmp_path: Path) -> None:
    port, _ = server
    flows = [flow(port, flow_id="now", size_bytes=1000),
             flow(port, flow_id="later", size_bytes=1000, start_s=30.0),
             flow(port, flow_id="forever", start_s=0.0)]
    out = flowsockets.JsonLines(str(tmp_path / "out.jsonl"))
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    recs = {r["flow_id"]: r for r in flowclient.run_flows(flows, time.time(), out, stop)}
    out.close()
    assert recs["now"]["error"] is None
    assert recs["later"]["error"] == "interrupted before it started"
    assert recs["forever"]["error"] is None and recs["forever"]["bytes_received"] > 0
    assert len(read_records((tmp_path / "out.jsonl").read_text())) == 3


def test_udp_cbr_into_sink(tmp_path: Path) -> None:
    port = free_port(socket.SOCK_DGRAM)
    stop = threading.Event()
    log = flowsockets.JsonLines(str(tmp_path / "sink.jsonl"))
    t = threading.Thread(target=flowserver.sink, args=("127.0.0.1", port, log, stop,
                                                     io.StringIO()), daemon=True)
    t.start()
    time.sleep(0.1)
    rec = flowclient.run_udp_flow(flow(port, protocol="udp", rate_bps=800_000,
                                     packet_size=1000, duration_s=0.5), threading.Event())
    time.sleep(0.1)
    stop.set()
    t.join(timeout=5)
    log.close()
    assert rec["error"] is None and rec["protocol"] == "udp"
    assert 45 <= rec["packets"] <= 51  # 100 packets/s for 0.5 s
    (sink,) = read_records((tmp_path / "sink.jsonl").read_text())
    assert sink["packets"] == rec["packets"] and sink["lost"] == 0
    assert sink["bytes"] == rec["bytes"]


def test_cli_single_flow(server, capsys) -> None:
    port, _ = server
    rc = flowtool.main(["client", "--dst", "127.0.0.1", "--port", str(port), "--size", "2KB"])
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and rec["bytes_received"] == 2000


def test_cli_flows_file(server, tmp_path: Path) -> None:
    port, _ = server
    spec = tmp_path / "flows.json"
    spec.write_text(dump_flows([flow(port, flow_id=f"x{i}", size_bytes=5000)
                                for i in range(3)]))
    out = tmp_path / "o.jsonl"
    assert flowtool.main(["client", "--flows", str(spec), "--out", str(out)]) == 0
    assert sorted(r["flow_id"] for r in read_records(out.read_text())) == ["x0", "x1", "x2"]


def test_mptcp_info_on_plain_socket_reports_fallback() -> None:
    with socket.socket() as s:
        assert flowsockets.mptcp_info(s)["mptcp_fallback"] is True


def test_a_run_long_flow_on_a_stalled_path_ends_with_the_run(monkeypatch) -> None:
    """A flow without size or duration ends normally when the run stops, even when its
    queued data cannot reach the server (a slow link after a handover): the server's
    count is waited for RUN_END_GRACE_S, not REPLY_GRACE_S, and it is no error."""
    monkeypatch.setattr(flowclient, "RUN_END_GRACE_S", 0.3)
    with socket.socket() as lsn:
        lsn.bind(("127.0.0.1", 0))
        lsn.listen(1)
        port = lsn.getsockname()[1]
        stop = threading.Event()
        threading.Timer(0.5, stop.set).start()
        t = time.time()
        # the listener accepts into its backlog but never reads: the data stays queued
        rec = flowclient.run_stream_flow(flow(port, flow_id="forever"), stop)
        took = time.time() - t
        # ... and it was reset, not left to drain after the run: the server's end of the
        # connection holds the data that reached it, then the reset
        conn, _ = lsn.accept()
        with conn, pytest.raises(ConnectionResetError):
            while conn.recv(1 << 20):
                pass
    assert rec["error"] is None and rec["bytes_received"] is None and rec["bytes"] > 0
    assert rec["note"] == ("ended with the run with data still queued: reset, not drained; "
                           "no byte count from the server") and rec["fct_s"] is None
    assert took < flowsockets.REPLY_GRACE_S / 2


def test_a_run_long_flow_with_nothing_queued_gets_the_count_and_is_not_reset(
        server, monkeypatch) -> None:
    """A flow the run's end finds with nothing queued (a slow sender) is closed normally:
    the server's count comes back within the grace, the flow has no note."""
    stop = threading.Event()

    def trickle(s, flow_, rec, stop_) -> None:  # a few bytes, then wait for the end
        rec["bytes"] = s.send(b"x" * 1000)
        stop_.wait(5)

    monkeypatch.setattr(flowclient, "_send_stream", trickle)
    threading.Timer(0.3, stop.set).start()
    rec = flowclient.run_stream_flow(flow(server[0], flow_id="slow"), stop)
    assert rec["error"] is None and rec["note"] is None, rec
    assert rec["bytes_received"] == rec["bytes"] == 1000


def test_the_grace_for_the_servers_count_starts_when_the_run_stops(monkeypatch) -> None:
    """Once the run has stopped, the wait for the server's count lasts the grace, not the
    grace after the socket's next receive timeout (it used to: up to `POLL_S` more at the
    end of every run).  A receive timeout far longer than the grace shows which."""
    monkeypatch.setattr(flowclient, "POLL_S", 30.0)
    a, b = socket.socketpair()
    with a, b:
        a.settimeout(30.0)  # as the flow's socket has it: POLL_S
        stop = threading.Event()
        stop.set()
        t = time.time()
        with pytest.raises(flowclient.Interrupted):
            flowclient._read_reply(a, stop, grace=0.3)
        assert time.time() - t < 15.0  # not a receive timeout: b never writes
        b.sendall(struct.pack("!Q", 7))  # and before the grace ends, a reply is read
        b.shutdown(socket.SHUT_WR)
        stop2 = threading.Event()
        stop2.set()
        assert flowclient._read_reply(a, stop2, grace=5.0) == struct.pack("!Q", 7)


def test_a_connection_still_receiving_when_the_run_stops_writes_its_record(
        tmp_path: Path) -> None:
    """Data arriving without a pause never lets a receive time out: the server looks at
    the stop after each receive too, and writes the connection's record (found missing in
    3 of 6 bundles of a CI study run before)."""
    port, stop, t, log = start_server(tmp_path)
    sending = threading.Event()
    done = threading.Event()

    def blast() -> None:
        with socket.create_connection(("127.0.0.1", port)) as c:
            chunk = b"x" * 65536
            while not done.is_set():
                try:
                    c.sendall(chunk)
                except OSError:
                    return
                sending.set()

    sender = threading.Thread(target=blast, daemon=True)
    sender.start()
    assert sending.wait(5)
    time.sleep(0.2)
    stop.set()                      # the run ends while the data still flows
    t.join(timeout=5)
    done.set()
    log.close()
    assert not t.is_alive()
    (rec,) = read_records((tmp_path / "srv.jsonl").read_text())
    assert rec["error"] == "interrupted" and rec["bytes"] > 0 and rec["t_first"] is not None
    sender.join(timeout=5)
    assert not sender.is_alive()  # the server reset the connection: sending failed


def test_the_server_resets_a_connection_the_run_ends(tmp_path: Path) -> None:
    """An MPTCP connection still sending when the server stops is reset (MP_FASTCLOSE: the
    sender's next send fails), not closed gracefully: the kernel would then go on taking
    the sender's data after the run (TCP resets by itself when it closes with data
    unread; MPTCP does not, so this is what the reset is for)."""
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM, flowsockets.IPPROTO_MPTCP).close()
    except OSError as exc:
        pytest.skip(f"no MPTCP in this kernel: {exc}")
    port = free_port()
    stop = threading.Event()
    log = flowsockets.JsonLines(str(tmp_path / "srv.jsonl"))
    ready = io.StringIO()
    t = threading.Thread(target=flowserver.serve, args=("127.0.0.1", port, "mptcp", log,
                                                      stop, ready), daemon=True)
    t.start()
    deadline = time.time() + 5
    while "listening" not in ready.getvalue() and time.time() < deadline:
        time.sleep(0.01)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM, flowsockets.IPPROTO_MPTCP) as c:
        c.connect(("127.0.0.1", port))
        c.sendall(b"x" * 1000)
        time.sleep(0.2)
        stop.set()
        t.join(timeout=5)
        log.close()
        c.settimeout(2)  # not reset: the sends go on until the window fills, then time out
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            for _ in range(100):
                c.sendall(b"x" * 65536)
                time.sleep(0.01)
    (rec,) = read_records((tmp_path / "srv.jsonl").read_text())
    assert rec["error"] == "interrupted" and rec["bytes"] >= 1000
