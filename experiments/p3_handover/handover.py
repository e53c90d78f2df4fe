"""P3's hand-over schemes in our runs: when each sender restarted after the link came
back, and what Bandwidth-Aware estimated (docs/handover.md).

    by = scheme_runs(out / "case1_wlan_to_imt")        # {"none": [run dirs], ...}
    t_up = handoff_time(run)                           # when the link came back (s, epoch)
    first_retransmission(run, t_up)                    # the sender's, from its capture
    restarts(run)                                      # the programs' log, sender sockets
    first_signal(run)                                  # when the first restart ICMP went out
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import tomllib

from analysis.pcap import read_packets
from testbed.core.units import parse_duration, parse_rate


def scheme_runs(spec_dir: Path) -> dict[str, list[Path]]:
    """The complete runs of one spec folder by ``transport.handover`` (``none`` when the
    spec leaves it out), in run-id order."""
    out: dict[str, list[Path]] = {}
    for spec in sorted(spec_dir.glob("*/spec.toml")):
        run = spec.parent
        meta = json.loads((run / "metadata.json").read_text())
        if meta.get("status") != "complete":
            continue
        scheme = tomllib.loads(spec.read_text()).get("transport", {}).get("handover", "none")
        out.setdefault(scheme, []).append(run)
    return out


def handoff_time(run: Path) -> float:
    """When the run's schedule brought the link back (``t_applied`` of the first event
    that set it up, or changed its rate with no outage), seconds since the epoch."""
    for line in (run / "samples" / "events.jsonl").read_text().splitlines():
        ev = json.loads(line)
        ch = ev.get("changes") or {}
        if ev.get("error") is None and (ch.get("up") is True or
                                        ("bw_bps" in ch and "up" not in ch)):
            return float(ev["t_applied"])
    raise ValueError(f"{run.name}: no hand-off in samples/events.jsonl")


def new_path_rtt_bdp(run: Path) -> tuple[float, float]:
    """(round-trip propagation delay in s, bandwidth-delay product in bytes) of the
    access link as the first hand-off leaves it (the spec's event: its bw and delay,
    both ways over the one access link)."""
    spec = tomllib.loads((run / "spec.toml").read_text())
    path = spec["topology"]["paths"][0]
    bw, delay = float(parse_rate(path["bw"])), parse_duration(path["delay"])
    for ev in sorted(spec.get("schedule", []), key=lambda e: parse_duration(e["at"])):
        if ev.get("down") is True:
            continue
        bw = float(parse_rate(ev["bw"])) if "bw" in ev else bw
        delay = parse_duration(ev["delay"]) if "delay" in ev else delay
        break
    rtt = 2 * delay
    return rtt, bw * rtt / 8


def _sender(run: Path) -> tuple[str, int]:
    """(host, source port) of the run's first TCP flow."""
    for line in (run / "samples" / "flows.jsonl").read_text().splitlines():
        f = json.loads(line)
        if f.get("protocol") == "tcp" and f.get("sport"):
            return str(f["src"]), int(f["sport"])
    raise ValueError(f"{run.name}: no TCP flow in samples/flows.jsonl")


def first_retransmission(run: Path, t_up: float, sport: int | None = None
                         ) -> float | None:
    """The time of the sender's first data segment after t_up that resends bytes it had
    sent before t_up, from its own capture (None: none).  sport: the socket's source
    port (default: the run's first TCP flow's)."""
    host, first = _sender(run)
    sport = first if sport is None else sport
    (pcap,) = sorted((run / "pcap").glob(f"{host}-*.pcap"))[:1]
    t = read_packets(pcap, columns=("ts_ns", "sport", "payload", "seq", "proto"))
    ts, sp, pl, seq = (t.cols["ts_ns"], t.cols["sport"], t.cols["payload"], t.cols["seq"])
    mine = (sp == sport) & (pl > 0)
    before = mine & (ts < int(t_up * 1e9))
    if not before.any():
        return None
    ends = (seq[before].astype(np.int64) + pl[before]) & 0xFFFFFFFF
    top = int(ends[-1])
    for e in ends:  # the highest end in sequence space (wrap-aware)
        if (int(e) - top) & 0x80000000 == 0:
            top = int(e)
    after = np.flatnonzero(mine & (ts >= int(t_up * 1e9)))
    for i in after:
        if ((int(seq[i]) - top) & 0xFFFFFFFF) >= 0x80000000:  # seq before the top: resent
            return float(ts[i]) / 1e9
    return None


def restarts(run: Path) -> list[dict[str, Any]]:
    """The programs' restart records of the run's sending sockets (``path`` not
    ``none``), from ``samples/handover-<cc>.jsonl``."""
    rows: list[dict[str, Any]] = []
    for f in sorted((run / "samples").glob("handover-reno_*.jsonl")):
        rows += [r for r in map(json.loads, f.read_text().splitlines())
                 if r.get("path") != "none"]
    return rows


def first_delivery(run: Path, t_up: float) -> float | None:
    """When the receiver first acknowledged new data at or after t_up: the start of the
    first bin of ``metrics/timeseries.parquet``'s ``delivered`` series there with bytes
    (epoch seconds; None: none)."""
    import pandas as pd

    ts = pd.read_parquet(run / "metrics" / "timeseries.parquet",
                         columns=["kind", "t", "bytes"])
    got = ts[(ts["kind"] == "delivered") & (ts["t"] >= t_up) & (ts["bytes"] > 0)]
    return float(got["t"].min()) if len(got) else None


def first_signal(run: Path) -> float | None:
    """When the notifier's first restart ICMP of the first hand-off went out (seconds
    since the epoch, from ``samples/handover-signal.jsonl``; None: none went out).  Its
    distance from `handoff_time` is the emulation's own delay in telling the sender of
    the hand-off, which the paper's host does not have."""
    f = run / "samples" / "handover-signal.jsonl"
    for rec in map(json.loads, f.read_text().splitlines() if f.exists() else []):
        if rec.get("gen") == 1 and "undone" not in rec:
            sent = [s["t"] for rs in (rec.get("sent") or {}).values() for s in rs]
            return min(sent) if sent else None
    return None


def second_restarts(run: Path) -> list[dict[str, Any]]:
    """The notifier's second restart ICMPs (``samples/handover-signal.jsonl`` lines with
    ``undone``: Linux had undone the socket's restart, docs/handover.md)."""
    f = run / "samples" / "handover-signal.jsonl"
    lines = f.read_text().splitlines() if f.exists() else []
    return [r for r in map(json.loads, lines) if "undone" in r]


def cwnd_after(run: Path, t_from: float, t_to: float) -> list[int]:
    """The sender's cwnd samples (segments) read between t_from and t_to (epoch seconds):
    those whose ``ss`` run began at or after t_from and whose time ``t`` is at most t_to.
    A sample's ``t`` is the middle of its run (``sample_s`` long, docs/transport.md), so
    a run that began before t_from may have read the socket before it."""
    host, sport = _sender(run)
    out = []
    for line in (run / "samples" / "cwnd.jsonl").read_text().splitlines():
        r = json.loads(line)
        began = float(r["t"]) - float(r.get("sample_s") or 0.0) / 2
        if r.get("host") == host and r.get("sport") == sport and \
                t_from <= began and float(r["t"]) <= t_to and r.get("cwnd") is not None:
            out.append(int(r["cwnd"]))
    return out
