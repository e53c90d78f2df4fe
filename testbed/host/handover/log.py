"""The hand-over programs' log: parse a ``bpftool map dump`` of ``ho_log`` (see
``bpf/handover.h``) into one record per restart, oldest first.

Each record: ``cc``, ``gen`` (the hand-off, 1 = first), ``scheme``
(``immediate-expiration`` | ``bandwidth-aware``), ``path`` (``open``: the restart found
the socket outside loss recovery and set cwnd 1 and ssthresh max(cwnd/2, 2) itself;
``loss``: the retransmission timer had already fired during the outage, so cwnd was 1
already; ``none``: the signal met an ACK outside loss recovery and no restart happened;
``timer``: in loss recovery the retransmission timer fired again before the restart,
i.e. the notification had no effect),
the socket (``src``, ``sport``, ``dst``, ``dport``), ``cwnd_before``,
``ssthresh_before``, ``mss``, the times ``t_signal``, ``t_restart``, ``t_seen`` and
``t_done`` (seconds since the epoch, like the captures; ``t_seen``: when the program met
the signal, at an ACK or a state change; ``t_done``: when the estimate was applied),
``una_seen`` (the socket's oldest unacknowledged byte then, before that ACK),
``undone`` (whether Linux undid the restart's loss marks, at most 1 per hand-off; the
notifier then sends a second restart ICMP: ``bpf/handover.h``, ``ho_undo_cwnd``),
``cwnd_redo`` (the cwnd Linux had when that second ICMP came, before the program set the
window back to where the undo left it; None: no second restart, ``ho_redo``),
and for ``bandwidth-aware`` the estimate: ``rtt_us`` (restart -> first ACK), ``lag_us``
between the pair of ACKs, see ``bpf/handover.h``), ``acked`` (bytes the pair's second
ACK acknowledged), ``bw_bps`` (acked x 8 / lag) and ``ssthresh`` (segments:
max(2, acked x rtt / (lag x mss))).  For
``immediate-expiration`` ``ssthresh`` is the one set at the restart.
"""

from __future__ import annotations

import ipaddress
import time
from typing import Any

from testbed.core.errors import InputError
from testbed.host.bpfdump import written_values

SCHEMES = {1: "immediate-expiration", 2: "bandwidth-aware"}
PATHS = {1: "open", 2: "loss", 3: "none", 4: "timer"}


def wall_minus_mono() -> float:
    """time.time() - CLOCK_MONOTONIC now (seconds): converts the programs' times."""
    return time.time() - time.monotonic_ns() / 1e9


def _addr(v: int) -> str:
    return str(ipaddress.IPv4Address(int(v).to_bytes(4, "little")))


def _port(v: int) -> int:
    return int.from_bytes(int(v).to_bytes(2, "little"), "big")


def _wall(ns: int, offset: float) -> float | None:
    return round(ns / 1e9 + offset, 6) if ns else None


def parse_handover_dump(text: str, cc: str, offset: float) -> list[dict[str, Any]]:
    """Records from ``bpftool [-j] map dump`` of a ``ho_log`` map, by ``seq``.

    text: the dump; cc: the control's name; offset: `wall_minus_mono` when the programs
    ran (converts their CLOCK_MONOTONIC times).  Raises `InputError` for other text.
    """
    out = []
    for v in written_values(text, "ho_log"):
        try:
            k = v["key"]
            rec: dict[str, Any] = {
                "cc": cc, "seq": int(v["seq"]), "gen": int(v["gen"]),
                "scheme": SCHEMES.get(int(v["scheme"]), str(v["scheme"])),
                "path": PATHS.get(int(v["path"]), str(v["path"])),
                "src": _addr(k["saddr"]), "sport": _port(k["sport"]),
                "dst": _addr(k["daddr"]), "dport": _port(k["dport"]),
                "ca_state": int(v["ca_state"]), "cwnd_before": int(v["cwnd_before"]),
                "ssthresh_before": int(v["ssthresh_before"]), "mss": int(v["mss"]),
                "t_signal": _wall(int(v["t_signal_ns"]), offset),
                "t_restart": _wall(int(v["t_restart_ns"]), offset),
                "t_seen": _wall(int(v["t_seen_ns"]), offset),
                "t_done": _wall(int(v["t_done_ns"]), offset),
                "una_seen": int(v["una_seen"]),
                "undone": int(v["undone"]),
                "cwnd_redo": int(v["cwnd_redo"]) or None,
                "ssthresh": int(v["ssthresh"]),
            }
            if rec["scheme"] == "bandwidth-aware":
                lag, acked = int(v["lag_us"]), int(v["acked"])
                rec.update(rtt_us=int(v["rtt_us"]) or None, lag_us=lag or None,
                           acked=acked or None,
                           bw_bps=round(acked * 8e6 / lag) if lag else None)
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"ho_log record without {exc}") from exc
        out.append(rec)
    out.sort(key=lambda r: r["seq"])
    return out
