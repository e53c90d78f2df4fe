"""The sending end of the flow tool: timed TCP/MPTCP and constant-bit-rate UDP flows.

`run_flows` starts each flow of a list at ``t0 + start_s`` in its own thread and writes
one record per flow as it ends (`testbed.plan.flowspec`), an interrupted or
failed one included.  A TCP/MPTCP flow ends when the server has reported the byte count
it received, which makes ``fct_s`` comparable with SYN -> last data ACK in a pcap.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Sequence
from typing import Any

from testbed.host.traffic.flowsockets import (
    CHUNK,
    POLL_S,
    REPLY_GRACE_S,
    UDP_HEADER,
    Interrupted,
    JsonLines,
    mptcp_info,
    reset_on_close,
    socket_protocol,
)
from testbed.plan.flowspec import FlowSpec, base_record

TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)
CONNECT_TIMEOUT_S = 30.0
# a flow "until the run ends" (no size, no duration) ends normally with the run.  With
# nothing queued, the server's byte count comes back within a round trip of the run's
# end; with data still queued in the send buffer (nearly always: a handover to 384 kbit/s
# held ~400 KB, 10 s of it) the connection is reset after this wait instead of draining
# after the run, and the count comes from the server's log (`FlowRun.collect`)
RUN_END_GRACE_S = 0.25


def _wait_until(t: float, stop: threading.Event) -> None:
    delay = t - time.time()
    if delay > 0 and stop.wait(delay):
        raise Interrupted


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
    """The server's reply, read until it closes; once stop is set, for grace seconds more
    at most (counted from the first look at stop that finds it set, to within 50 ms; not
    from the next receive timeout, which added up to `POLL_S` to every run's end), then
    `Interrupted`."""
    reply = b""
    grace_end = None
    while True:
        if grace_end is None and stop.is_set():
            grace_end = time.time() + grace
        if grace_end is not None:
            left = grace_end - time.time()
            if left <= 0:
                raise Interrupted
            s.settimeout(min(POLL_S, max(left, 0.05)))
        try:
            got = s.recv(64)
        except TimeoutError:
            continue
        if not got:
            return reply
        reply += got


def run_stream_flow(flow: FlowSpec, stop: threading.Event) -> dict[str, Any]:
    """Run one TCP/MPTCP flow to completion (or error); return its record."""
    rec = base_record(flow)
    rec["start"] = time.time()
    s = None
    cut = False  # the run's end cut it short: reset, not drained (`reset_on_close`)
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
                reply, cut = b"", True
                rec["note"] = ("ended with the run with data still queued: reset, not "
                               "drained; no byte count from the server")
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
        rec["error"], cut = "interrupted", True
    except OSError as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if rec["end"] is None:
            rec["end"] = time.time()
        if rec["error"] is not None:
            rec["fct_s"] = None
        if s is not None:
            if cut:
                reset_on_close(s)
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
