"""When did ``ss`` read the sockets?  The cwnd samples' times against the sender's capture.

Each cwnd sample (``samples/cwnd.jsonl``) of a sending socket holds ``bytes_acked``, the
socket's count of acknowledged bytes when ``ss`` read it.  The sender's capture, read by
tshark (an independent tool: not the testbed's analysis), shows when that count was
reached: the ACK whose relative acknowledgement number equals it arrived at ``a``, the
next higher one at ``b``, so ``ss`` read the socket at some moment in ``[a, b)``.  A
sample's time is *consistent* when it falls in (or, for an interval, overlaps) ``[a, b)``.
Samples whose count no captured ACK carried (the capture missed it) are left out.

Per bundle format 1.8 (docs/transport.md) a sample's ``t`` is the middle of its ``ss`` run
and ``sample_s`` the run's length, so the run spans ``t +- sample_s / 2``.  The table
shows, over every sample compared, the share consistent with:

* the run's start (what ``t`` was before format 1.8),
* ``t``, the middle of the run,
* the whole run ``[t - sample_s / 2, t + sample_s / 2]`` (it must be 100 %: the socket
  was read during the run),

and when in the run the read came (the middle of the part of ``[a, b)`` inside the run),
as a share of the run and in milliseconds after its start (how early the start, the
old ``t``, was) and after ``t``, and the run's length.  Each share is over the samples it applies to
(its count is shown).

    .venv/bin/python benchmarks/sample_time.py results/p3_handover-quick

Bundles before format 1.8 (no ``sample_s``) count in the first column only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from analysis import tshark

SERVER_PORTS = (5001, 5201)  # the flow tool's and iperf3's server ports


@dataclass
class Tally:
    """Samples compared and how many each time estimate is consistent with."""

    n: int = 0
    start: int = 0
    middle: int = 0
    run: int = 0
    timed: int = 0                                   # samples with a sample_s
    position: list[float] = field(default_factory=list)  # where in the run the read came
    after_start: list[float] = field(default_factory=list)  # ... s after the run's start
    after_t: list[float] = field(default_factory=list)      # ... s after t (its middle)
    lengths: list[float] = field(default_factory=list)

    def add(self, t: float, sample_s: float | None, a: float, b: float) -> None:
        """One sample: its t and sample_s, and the ACK interval [a, b) of its count."""
        self.n += 1
        if sample_s is None:
            self.start += a <= t < b
            return
        start, end = t - sample_s / 2, t + sample_s / 2
        self.timed += 1
        self.lengths.append(sample_s)
        self.start += a <= start < b
        self.middle += a <= t < b
        inside = a <= end and start < b
        self.run += inside
        if inside and sample_s > 0:
            lo, hi = max(a, start), min(b, end)
            self.position.append(((lo + hi) / 2 - start) / sample_s)
            self.after_start.append((lo + hi) / 2 - start)
            self.after_t.append((lo + hi) / 2 - t)


def ack_intervals(pcap: Path, sport: int, dport: int) -> tuple[np.ndarray, np.ndarray]:
    """(arrival times, relative ACK numbers) of the ACKs from dport to sport, by tshark."""
    fields = ("frame.time_epoch", "tcp.ack")
    res = subprocess.run(tshark.fields_argv(pcap, fields, display_filter=(
        f"tcp.srcport == {dport} && tcp.dstport == {sport}")),
        capture_output=True, text=True, check=True)
    got = tshark.parse_fields(res.stdout, fields)
    got = got[(got["frame.time_epoch"] != "") & (got["tcp.ack"] != "")]
    return (got["frame.time_epoch"].astype(float).to_numpy(),
            got["tcp.ack"].astype(np.int64).to_numpy())


def compare(samples: Iterable[dict], times: np.ndarray, acks: np.ndarray,
            tally: Tally) -> None:
    """Add each sample whose bytes_acked a captured ACK carried to tally.

    Linux's ``bytes_acked`` counts the SYN's sequence number, as tshark's relative
    acknowledgement numbers do, so the two are compared as they are."""
    for s in samples:
        count = s.get("bytes_acked")
        if count is None or not len(acks):
            continue
        i = int(np.searchsorted(acks, count, "left"))
        if i >= len(acks) or acks[i] != count:
            continue
        j = int(np.searchsorted(acks, count, "right"))
        b = float(times[j]) if j < len(times) else float("inf")
        tally.add(float(s["t"]), s.get("sample_s"), float(times[i]), b)


def bundle_dirs(paths: Iterable[Path]) -> list[Path]:
    """The run bundles under each path (itself, or any folder below with cwnd samples)."""
    out = []
    for p in paths:
        found = [p] if (p / "samples" / "cwnd.jsonl").is_file() else \
            sorted(c.parent.parent for c in p.rglob("samples/cwnd.jsonl"))
        out += [d for d in found if not d.is_symlink()]
    return out


def tally_bundle(run: Path, tally: Tally) -> None:
    rows = [json.loads(line) for line in
            (run / "samples" / "cwnd.jsonl").read_text().splitlines() if line.strip()]
    senders = {(r["host"], r["sport"], r["dport"]) for r in rows
               if r.get("dport") in SERVER_PORTS}
    for host, sport, dport in sorted(senders):
        pcaps = sorted((run / "pcap").glob(f"{host}-*.pcap"))
        if not pcaps:
            continue
        times, acks = ack_intervals(pcaps[0], sport, dport)
        order = np.argsort(acks, kind="stable")  # a count first reached by the earliest
        times, acks = times[order], acks[order]
        mine = [r for r in rows if (r["host"], r["sport"], r["dport"]) == (host, sport, dport)]
        compare(mine, times, acks, tally)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="+", type=Path,
                    help="run bundles, or folders holding them (a study's output)")
    args = ap.parse_args(argv)
    runs = bundle_dirs(args.folders)
    if not runs:
        print("no bundle with samples/cwnd.jsonl under the folders given", file=sys.stderr)
        return 2
    tally = Tally()
    for run in runs:
        tally_bundle(run, tally)
    if not tally.n:
        print("no sample's bytes_acked matches a captured ACK (no sender capture?)",
              file=sys.stderr)
        return 2

    def share(k: int, n: int) -> str:
        return f"{100 * k / n:.1f} %" if n else "--"

    def pct(v: list[float], q: float) -> str:
        return f"{np.percentile(v, q):.3f}" if v else "--"

    print(f"{len(runs)} bundles, {tally.n} samples compared ({tally.timed} with sample_s)\n")
    print("| consistent with the capture | samples | share |")
    print("|---|---:|---:|")
    print(f"| the `ss` run's start (`t` before format 1.8) | {tally.n} | "
          f"{share(tally.start, tally.n)} |")
    print(f"| `t`, the run's middle | {tally.timed} | {share(tally.middle, tally.timed)} |")
    print(f"| the whole run, `t +- sample_s / 2` | {tally.timed} | "
          f"{share(tally.run, tally.timed)} |")
    print()
    print("| quantity | p10 | median | p90 | max |")
    print("|---|---:|---:|---:|---:|")
    pos = tally.position
    print(f"| when in the run the read came, share of the run | {pct(pos, 10)} | "
          f"{pct(pos, 50)} | {pct(pos, 90)} | {pct(pos, 100)} |")
    ms = [x * 1e3 for x in tally.after_start]
    print(f"| ... ms after the run's start | {pct(ms, 10)} | {pct(ms, 50)} | {pct(ms, 90)} | "
          f"{pct(ms, 100)} |")
    ms = [x * 1e3 for x in tally.after_t]
    print(f"| ... ms after `t` (negative: before) | {pct(ms, 10)} | {pct(ms, 50)} | "
          f"{pct(ms, 90)} | {pct(ms, 100)} |")
    ln = [x * 1e3 for x in tally.lengths]
    print(f"| `sample_s`, ms | {pct(ln, 10)} | {pct(ln, 50)} | {pct(ln, 90)} | "
          f"{pct(ln, 100)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
