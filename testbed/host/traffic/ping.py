"""Ping series: per-echo RTTs (``samples/ping.jsonl``) and P2's summary table.

``ping -D -O -n`` prints a wall-clock stamp on every line and reports echoes that got
no answer before the next one was sent, so every echo gets a record::

    pr = PingRun(runner, host, "10.0.100.1", samples_dir, src="client", dst="server",
                 path="wifi", interval=0.2, count=50, bind="10.0.1.1")
    pr.start(); ...; pr.wait(30) or pr.stop(); rows = pr.collect()
    print(format_table([summarize(rows, label="wifi")]))

Emits ``samples/ping-<name>.txt`` (raw output) and appends to ``samples/ping.jsonl``
one ``{t, src, dst, path, seq, rtt_ms, lost}`` per echo (``t``: when the echo was
sent, ``time.time()`` clock; ``rtt_ms`` null when lost).
"""

from __future__ import annotations

import json
import math
import re
import signal
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from testbed.core.commands import CommandRunner
from testbed.core.errors import CommandTimeout, InputError
from testbed.core.process import Process
from testbed.core.transcript import Namespaced

_REPLY = re.compile(r"^\[(?P<t>\d+\.\d+)\] \d+ bytes from [^:]+: icmp_seq=(?P<seq>\d+)"
                    r".*? time=(?P<rtt>[\d.]+) ms")
_NOANSWER = re.compile(r"^\[(?P<t>\d+\.\d+)\] no answer yet for icmp_seq=(?P<seq>\d+)")
_TX = re.compile(r"(?P<tx>\d+) packets transmitted, (?P<rx>\d+) received")
_RTT = re.compile(r"= (?P<min>[\d.]+)/(?P<avg>[\d.]+)/(?P<max>[\d.]+)/(?P<mdev>[\d.]+) ms")


def ping_argv(dst_addr: str, *, interval: float = 1.0, count: int | None = None,
              duration: float | None = None, size: int = 56, bind: str | None = None,
              wait: float = 1.0) -> list[str]:
    """``ping -D -O -n`` argv.

    interval: seconds between echoes (< 0.2 s needs root, which the testbed has);
    count/duration: stop after so many echoes / seconds (``-c`` / ``-w``);
    size: payload bytes; bind: source address (``-I``) to pin a path; wait: per-echo
    timeout for the last echo (``-W``).
    """
    if interval <= 0:
        raise InputError(f"ping interval {interval!r} must be > 0")
    argv = ["ping", "-D", "-O", "-n", "-i", f"{interval:g}", "-s", str(size),
            "-W", f"{wait:g}"]
    if count is not None:
        argv += ["-c", str(count)]
    if duration is not None:
        argv += ["-w", f"{max(1, math.ceil(duration)):d}"]
    if bind:
        argv += ["-I", bind]
    return [*argv, dst_addr]


def parse_ping(text: str, *, src: str | None = None, dst: str | None = None,
               path: str | None = None, interval: float | None = None
               ) -> list[dict[str, Any]]:
    """Per-echo records from ``ping -D -O`` output (pure).

    Echoes up to the reported "packets transmitted" (or the highest sequence seen)
    without a reply are lost.  ``t`` is the send time: reply stamp minus RTT, or for a
    lost echo the "no answer yet" stamp minus interval (or interpolated).
    """
    replies: dict[int, tuple[float, float]] = {}
    noans: dict[int, float] = {}
    transmitted = None
    for line in text.splitlines():
        if m := _REPLY.match(line):
            seq = int(m.group("seq"))
            replies.setdefault(seq, (float(m.group("t")), float(m.group("rtt"))))
        elif m := _NOANSWER.match(line):
            noans.setdefault(int(m.group("seq")), float(m.group("t")))
        elif m := _TX.search(line):
            transmitted = int(m.group("tx"))
    last = max([*replies, *noans, 0])
    n = transmitted if transmitted is not None else last
    sent: dict[int, float] = {s: t - rtt / 1e3 for s, (t, rtt) in replies.items()}
    ivl = interval
    if ivl is None and len(sent) >= 2:
        seqs = sorted(sent)
        ivl = (sent[seqs[-1]] - sent[seqs[0]]) / max(1, seqs[-1] - seqs[0])
    for s, t in noans.items():
        if s not in sent:
            sent[s] = t - (ivl or 0.0)
    rows = []
    for seq in range(1, n + 1):
        t = sent.get(seq)
        if t is None and sent and ivl:
            ref = min(sent, key=lambda k: abs(k - seq))
            t = sent[ref] + (seq - ref) * ivl
        rtt = replies[seq][1] if seq in replies else None
        rows.append({"t": t, "src": src, "dst": dst, "path": path, "seq": seq,
                     "rtt_ms": rtt, "lost": rtt is None})
    return rows


def parse_ping_summary(text: str) -> dict[str, Any]:
    """ping's own statistics lines -> transmitted, received, loss_pct, min/avg/max/mdev."""
    out: dict[str, Any] = {"transmitted": None, "received": None, "loss_pct": None,
                           "min_ms": None, "avg_ms": None, "max_ms": None, "mdev_ms": None}
    if m := _TX.search(text):
        tx, rx = int(m.group("tx")), int(m.group("rx"))
        out.update(transmitted=tx, received=rx,
                   loss_pct=100.0 * (tx - rx) / tx if tx else None)
    if m := _RTT.search(text):
        out.update({f"{k}_ms": float(m.group(k)) for k in ("min", "avg", "max", "mdev")})
    return out


def summarize(rows: Iterable[Mapping[str, Any]], label: str = "") -> dict[str, Any]:
    """P2-style summary of per-echo records: like ping's own last two lines.

    mdev is computed as ping does: sqrt(mean(rtt^2) - mean(rtt)^2).
    """
    rows = list(rows)
    rtts = [r["rtt_ms"] for r in rows if r.get("rtt_ms") is not None]
    tx, rx = len(rows), len(rtts)
    out: dict[str, Any] = {"label": label, "transmitted": tx, "received": rx,
                           "loss_pct": 100.0 * (tx - rx) / tx if tx else None,
                           "min_ms": None, "avg_ms": None, "max_ms": None, "mdev_ms": None}
    if rtts:
        avg = sum(rtts) / rx
        var = max(0.0, sum(x * x for x in rtts) / rx - avg * avg)
        out.update(min_ms=min(rtts), avg_ms=avg, max_ms=max(rtts), mdev_ms=math.sqrt(var))
    return out


def format_table(summaries: Sequence[Mapping[str, Any]]) -> str:
    """A fixed-width text table of `summarize` results (one row each)."""
    head = ("path", "transmitted", "received", "loss %", "min ms", "avg ms", "max ms",
            "mdev ms")
    lines = ["{:<12} {:>11} {:>8} {:>7} {:>8} {:>8} {:>8} {:>8}".format(*head)]

    def f(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)
    for s in summaries:
        lines.append("{:<12} {:>11} {:>8} {:>7} {:>8} {:>8} {:>8} {:>8}".format(
            str(s.get("label", ""))[:12], s["transmitted"], s["received"],
            f(s["loss_pct"], ".1f"), f(s["min_ms"], ".3f"), f(s["avg_ms"], ".3f"),
            f(s["max_ms"], ".3f"), f(s["mdev_ms"], ".3f")))
    return "\n".join(lines) + "\n"


class PingRun:
    """One ping series from a host; raw text and per-echo records into samples/.

    runner: command runner; host: the Mininet host that pings; dst_addr: target;
    samples_dir: the bundle's samples/; name: file stem (``ping-<name>.txt``);
    src/dst/path: labels for the records; the rest as for `ping_argv`.
    """

    def __init__(self, runner: CommandRunner, host: Namespaced, dst_addr: str,
                 samples_dir: Path, *, name: str = "ping", src: str | None = None,
                 dst: str | None = None, path: str | None = None, interval: float = 1.0,
                 count: int | None = None, duration: float | None = None, size: int = 56,
                 bind: str | None = None):
        self.runner, self.host = runner, host
        self.samples_dir = Path(samples_dir)
        self.raw = self.samples_dir / f"ping-{name}.txt"
        self.labels = {"src": src or host.name, "dst": dst or dst_addr, "path": path}
        self.interval = interval
        self.argv = ping_argv(dst_addr, interval=interval, count=count, duration=duration,
                              size=size, bind=bind)
        self.proc: Process | None = None

    def start(self) -> None:
        """Start ping in the background."""
        self.samples_dir.mkdir(parents=True, exist_ok=True)
        self.proc = self.runner.spawn(self.argv, host=self.host, stdout=self.raw,
                                      log=self.raw.with_suffix(".log"))

    def wait(self, timeout: float | None = None) -> bool:
        """True once ping has exited by itself."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout)
        except CommandTimeout:
            return False
        return True

    def stop(self) -> None:
        """Stop ping with SIGINT (it then prints its statistics)."""
        if self.proc is not None:
            self.proc.stop(sig=signal.SIGINT)

    def collect(self) -> list[dict[str, Any]]:
        """Parse the raw output; append the records to ``samples/ping.jsonl``."""
        text = self.raw.read_text() if self.raw.exists() else ""
        rows = parse_ping(text, interval=self.interval, **self.labels)
        with open(self.samples_dir / "ping.jsonl", "a") as f:
            for r in rows:
                f.write(json.dumps(r, sort_keys=True) + "\n")
        return rows
