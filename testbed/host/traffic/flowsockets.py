"""What the flow tool's server and client share: socket options, timing, the record writer.

MPTCP's protocol number and ``MPTCP_INFO`` (`socket_protocol`, `mptcp_info`), a reset on
close for a connection the run's end cut short (`reset_on_close`), the UDP
payload header, the poll interval and reply grace, `Interrupted`, and `JsonLines` (the
thread-safe writer of the records).  Standard library only: the flow tool runs inside
the emulated hosts with ``python -S`` (`testbed.host.traffic.flowtool`).
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import sys
import threading
from pathlib import Path
from typing import IO, Any

IPPROTO_MPTCP = getattr(socket, "IPPROTO_MPTCP", 262)
SOL_MPTCP = 284
MPTCP_INFO = 1
MPTCP_INFO_FLAG_FALLBACK = 1
CHUNK = 256 * 1024
POLL_S = 0.5
REPLY_GRACE_S = 10.0
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


def reset_on_close(sock: socket.socket) -> None:
    """Make ``close`` reset the connection (``SO_LINGER`` on, 0 s): TCP sends an RST and
    MPTCP an MP_FASTCLOSE, and data still queued is dropped.  For a connection the run's
    end cut short: closed normally, the kernel would go on sending its queued data after
    the run (seen: 11 s of it at 1 Mbit/s, in the captures and in the next run's way)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


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
