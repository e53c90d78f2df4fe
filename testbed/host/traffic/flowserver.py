"""The receiving end of the flow tool: the TCP/MPTCP server and the UDP sink.

`serve` accepts connections until stopped, one thread each, counts the bytes of each and
answers the client's EOF with that count; `sink` counts UDP datagrams, losses and one-way
delay per source.  Both print a ``listening`` line once ready and write one JSON line per
connection or source (the records: `testbed.host.traffic.flowtool`).
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import sys
import threading
import time
from typing import IO, Any

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
            # data still arriving when the run ends: a receive never times out then, so
            # the stop is looked at here too (else the process exits without this record)
            if stop.is_set():
                raise Interrupted
        rec["t_eof"] = time.time()
        if protocol == "mptcp":
            rec.update(mptcp_info(conn))
        conn.settimeout(REPLY_GRACE_S)
        conn.sendall(struct.pack("!Q", n))
    except Interrupted:  # the run is over: nothing more is read, nor drained after it
        rec["error"] = "interrupted"
        reset_on_close(conn)
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
