"""The flow tool: a traffic server/sink and a client that runs many timed flows.

Runs inside Mininet hosts (``mnexec -a <pid> python -m testbed.host.traffic.flowtool ...``);
it only uses sockets (no subprocesses)::

    python -m testbed.host.traffic.flowtool server --port 5001 --protocol mptcp --log srv.jsonl
    python -m testbed.host.traffic.flowtool sink   --port 5002 --log sink.jsonl      # UDP
    python -m testbed.host.traffic.flowtool client --flows flows.json --t0 1700000000.0 \\
        --out flows-client.jsonl
    python -m testbed.host.traffic.flowtool client --dst 10.0.100.1 --port 5001 --size 200KB \\
        --protocol mptcp --out -                                # one flow, ad hoc

What each emits:

* ``server``: prints ``{"event": "listening", ...}`` on stdout once it accepts
  connections (the driver waits for that line), then one JSON line per connection in
  ``--log``: ``peer_addr, peer_port, local_addr, local_port, protocol, bytes, t_accept,
  t_first, t_eof, error`` (and ``mptcp_token``/``mptcp_subflows``/``mptcp_fallback`` for
  MPTCP).  After the client's EOF it sends the byte count (8 bytes, network order)
  and closes, which is how the client learns ``bytes_received`` and its end time.
* ``sink``: prints the same ``listening`` line; at exit (SIGTERM/SIGINT) one line per
  UDP source: ``peer_addr, peer_port, bytes, packets, lost, t_first, t_last,
  owd_ms_mean`` (one-way delay: hosts share one clock in Mininet).
* ``client``: with ``--go-file F`` it prints ``{"event": "ready"}`` and waits for F
  (which holds t0); then one record per flow (see `testbed.plan.flowspec`) appended to
  ``--out`` as each flow ends; on SIGTERM/SIGINT unfinished flows are written with
  ``error = "interrupted"`` (flows without a size or duration end normally then: their
  byte count is waited for `RUN_END_GRACE_S`, else ``bytes_received`` stays null and
  ``note`` says why), so every flow gets a record.  UDP flows are CBR: ``rate_bps``
  counts UDP payload bits; each payload starts with a sequence number and send time (16
  bytes) when it fits.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from testbed.core.units import parse_duration, parse_rate, parse_size
from testbed.plan.flowspec import FlowSpec, base_record, load_flows

IPPROTO_MPTCP = getattr(socket, "IPPROTO_MPTCP", 262)
SOL_MPTCP = 284
MPTCP_INFO = 1
MPTCP_INFO_FLAG_FALLBACK = 1
TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)
CHUNK = 256 * 1024
POLL_S = 0.5
CONNECT_TIMEOUT_S = 30.0
REPLY_GRACE_S = 10.0
# a flow "until the run ends" (no size, no duration) ends normally with the run; its data
# still queued in the send buffer may take long on a slow link (a handover to 384 kbit/s
# held ~400 KB: 10 s), so its byte count is waited for only this long
RUN_END_GRACE_S = 1.0
UDP_HEADER = struct.Struct("!Qd")  # sequence number, send time


class Interrupted(Exception):
    """The tool was asked to stop while a flow was still running."""


class JsonLines:
    """Thread-safe JSON-lines writer (a path, or ``-`` for stdout); flushes every line."""

    def __init__(self, path: str | None):
        self._lock = threading.Lock()
        if path in (None, ""):
            self._f: IO[str] | None = None
        elif path == "-":
            self._f = sys.stdout
        else:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._f = open(path, "a")  # noqa: SIM115 - closed in close()

    def write(self, obj: dict[str, Any]) -> None:
        if self._f is None:
            return
        line = json.dumps(obj, sort_keys=True) + "\n"
        with self._lock:
            self._f.write(line)
            self._f.flush()

    def close(self) -> None:
        if self._f is not None and self._f is not sys.stdout:
            self._f.close()


def socket_protocol(protocol: str) -> int:
    """The ``socket()`` protocol number for tcp / mptcp."""
    return IPPROTO_MPTCP if protocol == "mptcp" else socket.IPPROTO_TCP


def mptcp_info(sock: socket.socket) -> dict[str, Any]:
    """``MPTCP_INFO`` of a connected MPTCP socket: token, extra subflows, fallback.

    On 6.1 a connection that fell back to TCP passes the getsockopt to its TCP
    subflow, which refuses ``SOL_MPTCP``; that is reported as ``fallback``.
    """
    try:
        raw = sock.getsockopt(SOL_MPTCP, MPTCP_INFO, 64)
    except OSError:
        return {"mptcp_token": None, "mptcp_subflows": 0, "mptcp_fallback": True}
    if len(raw) < 16:
        return {"mptcp_token": None, "mptcp_subflows": None, "mptcp_fallback": None}
    flags, token = struct.unpack_from("=II", raw, 8)
    return {"mptcp_token": format(token, "x"), "mptcp_subflows": raw[0],
            "mptcp_fallback": bool(flags & MPTCP_INFO_FLAG_FALLBACK)}


def _wait_until(t: float, stop: threading.Event) -> None:
    delay = t - time.time()
    if delay > 0 and stop.wait(delay):
        raise Interrupted


# -- server ---------------------------------------------------------------------------
def _serve_conn(conn: socket.socket, peer: tuple, protocol: str, log: JsonLines,
                stop: threading.Event) -> None:
    rec: dict[str, Any] = {"event": "flow", "peer_addr": peer[0], "peer_port": peer[1],
                           "protocol": protocol, "bytes": 0, "t_accept": time.time(),
                           "t_first": None, "t_eof": None, "error": None}
    try:
        local = conn.getsockname()
        rec["local_addr"], rec["local_port"] = local[0], local[1]
        buf = bytearray(CHUNK)
        conn.settimeout(POLL_S)
        n = 0
        while True:
            try:
                got = conn.recv_into(buf)
            except TimeoutError:
                if stop.is_set():
                    raise Interrupted from None
                continue
            if got == 0:
                break
            if rec["t_first"] is None:
                rec["t_first"] = time.time()
            n += got
            rec["bytes"] = n
        rec["t_eof"] = time.time()
        if protocol == "mptcp":
            rec.update(mptcp_info(conn))
        conn.settimeout(REPLY_GRACE_S)
        conn.sendall(struct.pack("!Q", n))
    except Interrupted:
        rec["error"] = "interrupted"
    except OSError as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        with contextlib.suppress(OSError):
            conn.close()
        log.write(rec)


def serve(bind: str, port: int, protocol: str, log: JsonLines, stop: threading.Event,
          ready: IO[str] = sys.stdout) -> None:
    """Accept connections until stop; one thread per connection."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket_protocol(protocol))
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((bind, port))
    srv.listen(1024)
    srv.settimeout(POLL_S)
    ready.write(json.dumps({"event": "listening", "role": "server", "protocol": protocol,
                            "addr": bind, "port": port, "t": time.time()}) + "\n")
    ready.flush()
    threads = []
    try:
        while not stop.is_set():
            try:
                conn, peer = srv.accept()
            except TimeoutError:
                continue
            t = threading.Thread(target=_serve_conn, args=(conn, peer, protocol, log, stop),
                                 daemon=True)
            t.start()
            threads.append(t)
    finally:
        srv.close()
        for t in threads:
            t.join(timeout=POLL_S * 4)


def sink(bind: str, port: int, log: JsonLines, stop: threading.Event,
         ready: IO[str] = sys.stdout) -> None:
    """Count UDP datagrams per source until stop; write one line per source then."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
    s.bind((bind, port))
    s.settimeout(POLL_S)
    ready.write(json.dumps({"event": "listening", "role": "sink", "protocol": "udp",
                            "addr": bind, "port": port, "t": time.time()}) + "\n")
    ready.flush()
    peers: dict[tuple, dict[str, Any]] = {}
    buf = bytearray(65536)
    try:
        while not stop.is_set():
            try:
                n, peer = s.recvfrom_into(buf)
            except TimeoutError:
                continue
            now = time.time()
            st = peers.get(peer)
            if st is None:
                st = peers[peer] = {"event": "udp", "peer_addr": peer[0],
                                    "peer_port": peer[1], "bytes": 0, "packets": 0,
                                    "max_seq": -1, "t_first": now, "t_last": now,
                                    "owd_sum": 0.0, "owd_n": 0}
            st["bytes"] += n
            st["packets"] += 1
            st["t_last"] = now
            if n >= UDP_HEADER.size:
                seq, sent = UDP_HEADER.unpack_from(buf)
                st["max_seq"] = max(st["max_seq"], seq)
                st["owd_sum"] += now - sent
                st["owd_n"] += 1
    finally:
        s.close()
        for st in peers.values():
            st["lost"] = max(0, st["max_seq"] + 1 - st["packets"]) if st["owd_n"] else None
            st["owd_ms_mean"] = (st["owd_sum"] / st["owd_n"] * 1e3) if st["owd_n"] else None
            for k in ("owd_sum", "owd_n", "max_seq"):
                st.pop(k)
            log.write(st)


# -- client ---------------------------------------------------------------------------
def _send_stream(s: socket.socket, flow: FlowSpec, rec: dict[str, Any],
                 stop: threading.Event) -> None:
    data = memoryview(bytes(CHUNK))
    remaining = flow.size_bytes
    deadline = (rec["t_connected"] + flow.duration_s) if flow.duration_s else None
    sent = 0
    while True:
        if remaining is not None and remaining <= 0:
            break
        if deadline is not None and time.time() >= deadline:
            break
        if stop.is_set():
            if remaining is None and deadline is None:
                break  # "until the run ends": a normal end
            raise Interrupted
        n = CHUNK if remaining is None else min(CHUNK, remaining)
        try:
            k = s.send(data[:n])
        except TimeoutError:
            continue
        sent += k
        rec["bytes"] = sent
        if remaining is not None:
            remaining -= k


def _read_reply(s: socket.socket, stop: threading.Event,
                grace: float = REPLY_GRACE_S) -> bytes:
    reply = b""
    grace_end = None
    while True:
        try:
            got = s.recv(64)
        except TimeoutError:
            if stop.is_set():
                grace_end = grace_end or time.time() + grace
                if time.time() > grace_end:
                    raise Interrupted from None
            continue
        if not got:
            return reply
        reply += got


def run_stream_flow(flow: FlowSpec, stop: threading.Event) -> dict[str, Any]:
    """Run one TCP/MPTCP flow to completion (or error); return its record."""
    rec = base_record(flow)
    rec["start"] = time.time()
    s = None
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket_protocol(flow.protocol))
        if flow.cc:
            s.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, flow.cc.encode())
        if flow.bind_addr:
            s.bind((flow.bind_addr, 0))
        s.settimeout(CONNECT_TIMEOUT_S)
        rec["start"] = time.time()  # the FCT starts with the SYN, not with socket set-up
        s.connect((flow.dst_addr, flow.dport))
        rec["t_connected"] = time.time()
        rec["src_addr"], rec["sport"] = s.getsockname()[:2]
        s.settimeout(POLL_S)
        _send_stream(s, flow, rec, stop)
        if flow.protocol == "mptcp":
            rec.update(mptcp_info(s))
        s.shutdown(socket.SHUT_WR)
        run_long = flow.size_bytes is None and flow.duration_s is None
        if run_long:
            rec["end"] = time.time()  # it ended with the run
            try:
                reply = _read_reply(s, stop, RUN_END_GRACE_S)
            except Interrupted:  # not an error: the count is in the server's log
                reply = b""
                rec["note"] = ("ended with the run; data still queued, so no byte count "
                               "from the server")
        else:
            reply = _read_reply(s, stop)
            rec["end"] = time.time()
        if len(reply) >= 8:
            rec["bytes_received"] = struct.unpack("!Q", reply[:8])[0]
            rec["fct_s"] = rec["end"] - rec["start"]
            if rec["bytes_received"] != rec["bytes"]:
                rec["error"] = (f"server received {rec['bytes_received']} of "
                                f"{rec['bytes']} bytes")
        elif "note" not in rec:
            rec["error"] = "server closed without reporting its byte count"
    except Interrupted:
        rec["error"] = "interrupted"
    except OSError as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if rec["end"] is None:
            rec["end"] = time.time()
        if rec["error"] is not None:
            rec["fct_s"] = None
        if s is not None:
            with contextlib.suppress(OSError):
                s.close()
    return rec


def run_udp_flow(flow: FlowSpec, stop: threading.Event) -> dict[str, Any]:
    """Send a constant-bit-rate UDP flow for its duration (or until stop)."""
    rec = base_record(flow)
    rec["start"] = time.time()
    rec["packets"] = 0
    s = None
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if flow.bind_addr:
            s.bind((flow.bind_addr, 0))
        s.connect((flow.dst_addr, flow.dport))
        rec["t_connected"] = time.time()
        rec["src_addr"], rec["sport"] = s.getsockname()[:2]
        payload = bytearray(flow.packet_size)
        interval = flow.packet_size * 8 / float(flow.rate_bps or 1)
        t_base = time.time()
        end = t_base + flow.duration_s if flow.duration_s else None
        seq = 0
        while not stop.is_set():
            due = t_base + seq * interval
            now = time.time()
            if end is not None and due >= end:
                break
            if due > now:
                if stop.wait(due - now):
                    break
            elif now - due > 0.2:  # far behind (e.g. CPU starved): do not burst
                t_base += now - due
                continue
            if flow.packet_size >= UDP_HEADER.size:
                UDP_HEADER.pack_into(payload, 0, seq, time.time())
            try:
                rec["bytes"] += s.send(payload)
                rec["packets"] += 1
            except (ConnectionRefusedError, BlockingIOError):
                pass  # no sink yet / queue full: the datagram is lost, as on a wire
            seq += 1
        rec["end"] = time.time()
        rec["fct_s"] = rec["end"] - rec["start"]
    except OSError as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"
        rec["end"] = time.time()
    finally:
        if s is not None:
            s.close()
    return rec


def run_flows(flows: Sequence[FlowSpec], t0: float, out: JsonLines,
              stop: threading.Event) -> list[dict[str, Any]]:
    """Run flows, each at ``t0 + start_s`` in its own thread; write and return records."""
    records: list[dict[str, Any]] = []
    lock = threading.Lock()

    def one(flow: FlowSpec) -> None:
        try:
            _wait_until(t0 + flow.start_s, stop)
        except Interrupted:
            rec = base_record(flow)
            rec["start"] = rec["end"] = time.time()
            rec["error"] = "interrupted before it started"
        else:
            rec = (run_udp_flow if flow.protocol == "udp" else run_stream_flow)(flow, stop)
        out.write(rec)
        with lock:
            records.append(rec)

    threads = [threading.Thread(target=one, args=(f,), daemon=True) for f in flows]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(timeout=POLL_S)
    return records


# -- command line ---------------------------------------------------------------------
def wait_for_go(path: Path, stop: threading.Event, ready: IO[str] = sys.stdout
                ) -> float | None:
    """Print a ready line, wait for path to appear, return the t0 written in it.

    Lets a driver start every client first (Python starts slowly in an emulated VM)
    and then release them all on one time origin.  None if stopped before.
    """
    ready.write(json.dumps({"event": "ready", "role": "client", "t": time.time()}) + "\n")
    ready.flush()
    while not stop.is_set():
        try:
            text = path.read_text().strip()
        except OSError:
            text = ""
        if text:
            return float(text)
        stop.wait(0.01)
    return None


def _stop_on_signals(stop: threading.Event) -> dict[int, Any]:
    """SIGTERM/SIGINT set stop; returns the previous handlers."""
    def handler(_signum: int, _frame: Any) -> None:
        stop.set()
    return {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}


def build_parser() -> argparse.ArgumentParser:
    """The flow tool's argument parser."""
    p = argparse.ArgumentParser(prog="python -m testbed.host.traffic.flowtool",
                                description="Traffic server/sink and timed-flow client.")
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("server", "sink"):
        sp = sub.add_parser(name, help="TCP/MPTCP server" if name == "server" else "UDP sink")
        sp.add_argument("--bind", default="0.0.0.0")
        sp.add_argument("--port", type=int, required=True)
        if name == "server":
            sp.add_argument("--protocol", choices=("tcp", "mptcp"), default="tcp")
        sp.add_argument("--log", default=None, help="JSON lines per connection/source")
    c = sub.add_parser("client", help="run flows (a --flows file or one flow from options)")
    c.add_argument("--flows", help="JSON list of flows (testbed.plan.flowspec.dump_flows)")
    c.add_argument("--t0", type=float, default=None, help="time origin (epoch s; default now)")
    c.add_argument("--go-file", default=None,
                   help="print a ready line, wait until this file exists, read t0 from it")
    c.add_argument("--out", default="-", help="records (JSON lines); '-' for stdout")
    c.add_argument("--timeout", type=float, default=None, help="stop all flows after this")
    c.add_argument("--dst")
    c.add_argument("--port", type=int)
    c.add_argument("--protocol", choices=("tcp", "mptcp", "udp"), default="tcp")
    c.add_argument("--size", help="e.g. 200KB")
    c.add_argument("--duration", help="e.g. 10s")
    c.add_argument("--rate", help="UDP rate, e.g. 1Mbit")
    c.add_argument("--packet-size", type=int, default=1000)
    c.add_argument("--bind", default=None, help="source address (pins the path)")
    c.add_argument("--cc", default=None)
    c.add_argument("--flow-id", default="f0")
    return p


def _single_flow(a: argparse.Namespace) -> FlowSpec:
    if not a.dst or not a.port:
        raise SystemExit("flowtool client: give --flows FILE, or --dst and --port")
    flow = FlowSpec(flow_id=a.flow_id, workload="adhoc", src="local", dst=a.dst,
                    protocol=a.protocol, dst_addr=a.dst, dport=a.port,
                    size_bytes=parse_size(a.size) if a.size else None,
                    duration_s=parse_duration(a.duration) if a.duration else None,
                    bind_addr=a.bind, cc=a.cc,
                    rate_bps=parse_rate(a.rate) if a.rate else None,
                    packet_size=a.packet_size)
    flow.check()
    return flow


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (1 if any flow failed, for the client)."""
    a = build_parser().parse_args(argv)
    stop = threading.Event()
    old = _stop_on_signals(stop)
    try:
        return _main(a, stop)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _main(a: argparse.Namespace, stop: threading.Event) -> int:
    if a.cmd in ("server", "sink"):
        log = JsonLines(a.log)
        try:
            if a.cmd == "server":
                serve(a.bind, a.port, a.protocol, log, stop)
            else:
                sink(a.bind, a.port, log, stop)
        finally:
            log.close()
        return 0
    flows = load_flows(Path(a.flows).read_text()) if a.flows else [_single_flow(a)]
    t0 = a.t0
    if a.go_file:
        t0 = wait_for_go(Path(a.go_file), stop)
        if t0 is None:
            return 1
    out = JsonLines(a.out)
    if a.timeout:
        timer = threading.Timer(a.timeout, stop.set)
        timer.daemon = True
        timer.start()
    try:
        records = run_flows(flows, t0 if t0 is not None else time.time(), out, stop)
    finally:
        out.close()
    return 1 if any(r["error"] for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
