"""The notifier's hand in a sender's network namespace: a process started there once per
run (``python -m testbed.host.handover.agent``) that sends the restart ICMPs
(`testbed.host.handover.icmp`) to its own sockets when told to.

Protocol (lines on stdin, one JSON line back on stdout for each):
``send <json list of socket records>`` -> ``{"sent": [...], "skipped": [...], "t": ...}``
(a record whose source address is not this namespace's is skipped; after sending, the
namespace's cached path MTUs are dropped again, `restore_mtu`); ``quit`` or the end of
input stops it.  It prints ``{"ready": true}`` once scapy is loaded.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Callable
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


ROUTE_FLUSH = "/proc/sys/net/ipv4/route/flush"


def restore_mtu(path: str = ROUTE_FLUSH) -> None:
    """Forget the path MTUs the restart ICMPs just lowered (``net.ipv4.route.flush``
    in this namespace): the kernel has already retransmitted at the lower size, and the
    sockets' next segments go back to full size (``tcp_current_mss`` re-reads the
    route's MTU), so only the restarted segment is split."""
    with open(path, "w") as f:
        f.write("1\n")


def handle(line: str, raw: Any, local: dict[str, bool],
           after_send: Callable[[], None] = restore_mtu) -> dict[str, Any]:
    """Act on one command line; returns the reply.  raw: the raw IP socket (anything with
    ``sendto``); after_send: called once ICMPs went out (`restore_mtu`)."""
    cmd, _, arg = line.strip().partition(" ")
    if cmd != "send":
        return {"error": f"unknown command {cmd!r}"}
    sent, skipped = [], []
    for rec in json.loads(arg):
        sock = SockState(**rec)
        if not is_local(sock.saddr, local):
            skipped.append(sock.as_record())
            continue
        pkt = frag_needed(sock)
        t_mono = time.monotonic_ns()
        raw.sendto(pkt, (sock.saddr, 0))
        sent.append({**sock.as_record(), "t": time.time(), "t_mono_ns": t_mono})
    if sent:
        after_send()
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
