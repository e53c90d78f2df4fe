"""The notifier's hand in a sender's network namespace: a process started there once per
run (``python -m testbed.host.handover.agent``) that sends the restart ICMPs
(`testbed.host.handover.icmp`) to its own sockets when told to.

Protocol (lines on stdin, one JSON line back on stdout for each):
``send <json list of socket records>`` -> ``{"sent": [...], "skipped": [...], "t": ...}``
(a record whose source address is not this namespace's is skipped); ``quit`` or the end
of input stops it.  It prints ``{"ready": true}`` once scapy is loaded.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from typing import Any

from testbed.host.handover.icmp import SockState, frag_needed


def is_local(addr: str, cache: dict[str, bool]) -> bool:
    """Whether addr belongs to this namespace (a bind to it succeeds)."""
    if addr not in cache:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind((addr, 0))
                cache[addr] = True
            except OSError:
                cache[addr] = False
    return cache[addr]


def handle(line: str, raw: socket.socket, local: dict[str, bool]) -> dict[str, Any]:
    """Act on one command line; returns the reply."""
    cmd, _, arg = line.strip().partition(" ")
    if cmd != "send":
        return {"error": f"unknown command {cmd!r}"}
    sent, skipped = [], []
    for rec in json.loads(arg):
        sock = SockState(**rec)
        if not is_local(sock.saddr, local):
            skipped.append(sock.as_record())
            continue
        raw.sendto(frag_needed(sock), (sock.saddr, 0))
        sent.append({**sock.as_record(), "t": time.time()})
    return {"sent": sent, "skipped": skipped, "t": time.time()}


def main() -> int:
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    frag_needed(SockState("10.0.0.1", "10.0.0.2", 1, 2, 0, 1, 1448, 32, 1, 0, 0))  # load
    local: dict[str, bool] = {}
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        try:
            reply = handle(line, raw, local)
        except (OSError, ValueError, TypeError) as exc:
            reply = {"error": str(exc) or type(exc).__name__}
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
