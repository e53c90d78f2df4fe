"""cwnd / RTT sampling with ``ss -tinHM`` from inside a host, and its pure parser.

::

    s = Sampler(runner, net.host("client"), samples_dir, interval=0.05, ports={5001})
    s.start(); ... workload ...; s.stop()        # -> samples/ss-client.txt, cwnd.jsonl

Emits ``samples/ss-<host>.txt`` (every raw ``ss`` output between a ``# t=<epoch>`` line,
written as ``ss`` starts, and a ``# t_end=<epoch>`` line, written when it has exited) and
appends to ``samples/cwnd.jsonl`` one row per TCP socket (plain TCP flow or MPTCP subflow)
per sample: ``t, sample_s, host, src_addr, sport, dst_addr, dport, protocol ("tcp" |
"mptcp"), mptcp_token, cc, cwnd, ssthresh, srtt_ms, rttvar_ms, delivery_rate_bps,
bytes_acked, retrans`` plus ``state``, ``mptcp_fallback``, ``mptcp_subflow_id``,
``bytes_sent``, ``lost``, ``unacked``, ``pacing_rate_bps``.

When a sample was taken: ``ss`` reads the sockets somewhere between its start and its
exit (after loading itself, before printing), and under software emulation one run takes
70-90 ms on an idle VM and longer on a busy one.  So ``t`` is the middle of the run and
``sample_s`` its length: the socket state is that of a moment within ``t +- sample_s / 2``.
(Before bundle format 1.8 ``t`` was the start, up to a whole run early.)

Subflow -> connection on 6.1: ``ss -tin`` shows each MPTCP subflow as a TCP socket
with ``tcp-ulp-mptcp ... token:<remote>(id:<n>)/<local>(id:<m>)``; the *local* token
equals the ``token:`` of the MPTCP socket (``ss -M``) on the same host and the
``mptcp_token`` the flow tool records, so ``mptcp_token`` joins subflows, connections
and flows.  Limits: the listener side's subflows carry the same token scheme; a subflow
whose connection fell back to TCP keeps the ULP with a remote token of 0 (its MPTCP
socket is flagged ``fallback``, copied into ``mptcp_fallback``); sockets that close
between two samples are simply absent; ``ss`` has no per-subflow data-sequence view.
Two modes.  ``loop`` (default): one bash loop runs inside the host for the whole
sampling (``ss``, then ``sleep interval``, each sample after a ``# t=$EPOCHREALTIME``
line), so no ``mnexec`` or Python work happens per sample; its raw file is parsed into
``cwnd.jsonl`` when the sampler stops.  ``spawn``: a thread runs ``mnexec ... ss`` per
sample and writes rows as it goes.  Either way the real period is the interval plus
the time ``ss`` takes (much longer than 50 ms in an overloaded emulated VM); every row
carries its own time.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from testbed.core.commands import CommandRunner
from testbed.core.transcript import Namespaced

DEFAULT_INTERVAL = 0.05
_NETIDS = {"tcp", "mptcp", "udp", "raw", "u_str", "u_dgr", "u_seq", "sctp", "dccp"}
_BARE_FLAGS = {"ts", "sack", "ecn", "ecnseen", "fastopen", "app_limited", "fallback",
               "tcp-ulp-mptcp", "tcp-ulp-tls", "cwnd_limited", "remote_key", "connected",
               "orphan", "closed"}
_PAIRS = {"send", "pacing_rate", "delivery_rate", "max_pacing_rate"}
_RATE = re.compile(r"^(?P<n>[\d.]+)(?P<u>[KMGT]?)bps$")
_ULP_TOKEN = re.compile(r"^(?P<rem>[0-9a-f]+)\(id:(?P<rid>\d+)\)/(?P<loc>[0-9a-f]+)"
                        r"\(id:(?P<lid>\d+)\)$")
_CC = re.compile(r"^[a-z][a-z0-9_]*$")


def ss_argv() -> list[str]:
    """``ss -tinHM``: TCP and MPTCP sockets, internal info, numeric, no header."""
    return ["ss", "-tinHM"]


LOOP_SCRIPT = ('while :; do printf \'# t=%s\\n\' "$EPOCHREALTIME"; ss -tinHM; '
               'printf \'# t_end=%s\\n\' "$EPOCHREALTIME"; sleep "$1"; done')


def loop_argv(interval: float) -> list[str]:
    """A bash loop printing ``# t=<epoch>``, ``ss -tinHM`` and ``# t_end=<epoch>`` every
    interval seconds."""
    return ["bash", "-c", LOOP_SCRIPT, "testbed-sampler", f"{interval:g}"]


def _stamp(line: str, prefix: str) -> float | None:
    try:
        return float(line[len(prefix):].split()[0].replace(",", "."))
    except (ValueError, IndexError):
        return None


def split_samples(text: str) -> list[tuple[float, float | None, str]]:
    """Raw sampler output -> (start, end, ss text) per sample; end is None when the sample
    has no ``# t_end=`` line (raw files before format 1.8); a torn last sample is dropped
    (one without its end line; in a file without end lines, one without a final
    newline)."""
    out: list[tuple[float, float | None, str]] = []
    t: float | None = None
    end: float | None = None
    buf: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.startswith("# t="):
            if t is not None:
                out.append((t, end, "".join(buf)))
            t, end, buf = _stamp(line, "# t="), None, []
        elif line.startswith("# t_end="):
            if t is not None:
                end = _stamp(line, "# t_end=")
        elif t is not None and end is None:
            buf.append(line)
    # a sample without its end line is torn, unless the file has no end lines at all
    if t is not None and (end is not None or (text.endswith("\n")
                                              and "# t_end=" not in text)):
        out.append((t, end, "".join(buf)))
    return out


def sample_time(start: float, end: float | None) -> tuple[float, float | None]:
    """(t, sample_s) of one ``ss`` run: its middle and its length (start and None without
    an end stamp; a clock step back gives a length of 0)."""
    if end is None:
        return start, None
    length = max(end - start, 0.0)
    return start + length / 2, length


def parse_rate(text: str) -> float | None:
    """``"5549871bps"`` / ``"5.5Mbps"`` -> bits per second."""
    m = _RATE.match(text)
    if not m:
        return None
    return float(m.group("n")) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[m.group("u")]


def split_endpoint(text: str) -> tuple[str, int | None]:
    """``"10.0.1.1:5001"`` / ``"[::1]:22"`` / ``"*:*"`` -> (address, port)."""
    addr, _, port = text.rpartition(":")
    addr = addr.strip("[]")
    if "%" in addr:
        addr = addr.split("%", 1)[0]
    return addr, int(port) if port.isdigit() else None


def _num(v: str | None) -> float | int | None:
    if v is None:
        return None
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return None


def parse_info(text: str) -> dict[str, Any]:
    """The info tokens of one socket (``key:value``, ``key value``, bare words)."""
    tok = text.split()
    info: dict[str, Any] = {"_flags": []}
    i = 0
    while i < len(tok):
        t = tok[i]
        if t in _PAIRS and i + 1 < len(tok):
            info[t] = tok[i + 1]
            i += 2
            continue
        if ":" in t and not t.startswith(":"):
            k, v = t.split(":", 1)
            info.setdefault(k, v)
        elif _CC.match(t) and t not in _BARE_FLAGS and "cc" not in info:
            info["cc"] = t
        else:
            info["_flags"].append(t)
        i += 1
    return info


def _socket_line(line: str, default_netid: str) -> dict[str, Any] | None:
    tok = line.split()
    if not tok or tok[0] in ("Netid", "State"):
        return None
    netid = None
    if tok[0] in _NETIDS:
        netid, tok = tok[0], tok[1:]
    if len(tok) < 5:
        return None
    src, sport = split_endpoint(tok[3])
    dst, dport = split_endpoint(tok[4])
    return {"netid": netid or default_netid, "state": tok[0], "recv_q": _num(tok[1]),
            "send_q": _num(tok[2]), "src_addr": src, "sport": sport, "dst_addr": dst,
            "dport": dport, "_info": []}


def _typed(entry: dict[str, Any], info: dict[str, Any]) -> None:
    entry["cc"] = info.get("cc") if entry["netid"] == "tcp" else None
    rtt = info.get("rtt")
    if rtt and "/" in rtt:
        a, b = rtt.split("/", 1)
        entry["srtt_ms"], entry["rttvar_ms"] = _num(a), _num(b)
    else:
        entry["srtt_ms"] = entry["rttvar_ms"] = None
    for k in ("cwnd", "ssthresh", "bytes_acked", "bytes_sent", "bytes_retrans",
              "bytes_received", "lost", "unacked", "mss", "delivered", "notsent"):
        entry[k] = _num(info.get(k))
    entry["minrtt_ms"] = _num(info.get("minrtt"))
    retrans = info.get("retrans")
    entry["retrans"] = _num(retrans.split("/")[-1]) if retrans else 0
    entry["delivery_rate_bps"] = parse_rate(info["delivery_rate"]) \
        if "delivery_rate" in info else None
    entry["pacing_rate_bps"] = parse_rate(info["pacing_rate"]) if "pacing_rate" in info \
        else None
    entry["send_bps"] = parse_rate(info["send"]) if "send" in info else None
    entry["mptcp_token"] = entry["mptcp_remote_token"] = None
    entry["mptcp_subflow_id"] = entry["mptcp_flags"] = None
    entry["mptcp_fallback"] = None
    if entry["netid"] == "mptcp":
        tokv = info.get("token")
        entry["mptcp_token"] = format(int(tokv, 16), "x") if tokv else None
        entry["mptcp_fallback"] = "fallback" in info["_flags"]
        entry["subflows"] = _num(info.get("subflows")) or 0
    elif "tcp-ulp-mptcp" in info["_flags"]:
        m = _ULP_TOKEN.match(info.get("token", ""))
        if m:
            entry["mptcp_token"] = format(int(m.group("loc"), 16), "x")
            entry["mptcp_remote_token"] = format(int(m.group("rem"), 16), "x")
            entry["mptcp_subflow_id"] = int(m.group("lid"))
        entry["mptcp_flags"] = info.get("flags")


def parse_ss(text: str, netid: str = "tcp") -> list[dict[str, Any]]:
    """Sockets in ``ss -tin[M]`` output (with or without header / Netid column); pure.

    netid: the socket kind when the output has no Netid column: ``ss -ti`` lists TCP
    sockets, ``ss -Mai`` (pass ``"mptcp"``) only MPTCP ones.

    Each entry: netid (tcp | mptcp), state, recv_q, send_q, src_addr, sport, dst_addr,
    dport, cc, cwnd, ssthresh, srtt_ms, rttvar_ms, minrtt_ms, bytes_acked, bytes_sent,
    bytes_retrans, bytes_received, lost, unacked, retrans (total), delivery_rate_bps,
    pacing_rate_bps, send_bps, mss; MPTCP: mptcp_token (local, hex), and for
    subflows mptcp_remote_token / mptcp_subflow_id / mptcp_flags, for MPTCP sockets
    subflows / mptcp_fallback; plus ``info``: every raw key.
    """
    entries: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if line[0] in " \t":
            if cur is not None:
                cur["_info"].append(line.strip())
            continue
        new = _socket_line(line, netid)
        if new is not None:
            cur = new
            entries.append(cur)
    for e in entries:
        info = parse_info(" ".join(e.pop("_info")))
        _typed(e, info)
        e["info"] = {k: v for k, v in info.items() if k != "_flags"}
        e["info"]["flags"] = info["_flags"]
    return entries


CWND_FIELDS = ("t", "sample_s", "host", "src_addr", "sport", "dst_addr", "dport", "protocol",
               "mptcp_token", "cc", "cwnd", "ssthresh", "srtt_ms", "rttvar_ms",
               "delivery_rate_bps", "bytes_acked", "retrans", "state", "mptcp_fallback",
               "mptcp_subflow_id", "bytes_sent", "lost", "unacked", "pacing_rate_bps")


def cwnd_rows(entries: Iterable[dict[str, Any]], t: float, host: str,
              ports: Iterable[int] | None = None,
              sample_s: float | None = None) -> list[dict[str, Any]]:
    """``samples/cwnd.jsonl`` rows: one per TCP socket (flow or subflow); pure.

    t: when the sample was taken (`sample_time`); ports: keep only sockets with one of
    these as source or destination port; sample_s: how long the ``ss`` run took.
    """
    entries = list(entries)
    fallback = {e["mptcp_token"]: e["mptcp_fallback"] for e in entries
                if e["netid"] == "mptcp" and e["mptcp_token"]}
    keep = set(ports) if ports is not None else None
    rows = []
    for e in entries:
        if e["netid"] != "tcp":
            continue
        if keep is not None and e["sport"] not in keep and e["dport"] not in keep:
            continue
        row = {k: e.get(k) for k in CWND_FIELDS}
        row.update(t=t, sample_s=None if sample_s is None else round(sample_s, 6), host=host,
                   protocol="mptcp" if e["mptcp_token"] is not None else "tcp",
                   mptcp_fallback=fallback.get(e["mptcp_token"]) if e["mptcp_token"]
                   else None)
        rows.append(row)
    return rows


class Sampler:
    """Samples ``ss -tinHM`` in a host every ``interval`` seconds.

    runner: command runner; host: Mininet host (the sender); samples_dir: the bundle's
    samples/; interval: seconds (default 0.05); ports: keep only sockets using these
    ports (None: all); mode: ``loop`` (one bash loop in the host) or ``spawn`` (one
    ``ss`` command per sample from a thread).
    """

    def __init__(self, runner: CommandRunner, host: Namespaced, samples_dir: Path,
                 interval: float = DEFAULT_INTERVAL, ports: Iterable[int] | None = None,
                 mode: str = "loop"):
        if mode not in ("loop", "spawn"):
            raise ValueError(f"sampler mode {mode!r}: use 'loop' or 'spawn'")
        self.runner, self.host = runner, host
        self.samples_dir = Path(samples_dir)
        self.interval = interval
        self.ports = set(ports) if ports is not None else None
        self.mode = mode
        self.raw_path = self.samples_dir / f"ss-{host.name}.txt"
        self.rows_path = self.samples_dir / "cwnd.jsonl"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: Any = None
        self._offset = 0
        self.samples = 0
        self.rows = 0
        self.errors = 0
        self._lengths: list[float] = []  # each sample's ss run, s

    def _write_rows(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            with open(self.rows_path, "a") as f:
                for r in rows:
                    f.write(json.dumps(r, sort_keys=True) + "\n")
        self.rows += len(rows)

    def sample_once(self) -> list[dict[str, Any]]:
        """Take one sample now (``spawn`` mode's step); return its rows (also written)."""
        start = time.time()
        res = self.runner.run(ss_argv(), host=self.host, record=self.samples == 0,
                              check=False, timeout=10)
        end = time.time()
        if res.returncode != 0:
            self.errors += 1
            return []
        t, length = sample_time(start, end)
        rows = cwnd_rows(parse_ss(res.stdout), t, self.host.name, self.ports, length)
        self._lengths.append(length)
        with open(self.raw_path, "a") as raw:
            text = res.stdout if res.stdout.endswith("\n") or not res.stdout \
                else res.stdout + "\n"
            raw.write(f"# t={start:.6f} host={self.host.name}\n{text}# t_end={end:.6f}\n")
        self._write_rows(rows)
        self.samples += 1
        return rows

    def _loop(self) -> None:
        t_next = time.time()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception:  # a sampler must not kill the run
                self.errors += 1
            t_next += self.interval
            now = time.time()
            if t_next < now:  # slower than the interval: skip missed ticks
                t_next = now
            self._stop.wait(t_next - now)

    def start(self) -> None:
        """Start sampling in the background."""
        self.samples_dir.mkdir(parents=True, exist_ok=True)
        if self.mode == "loop":
            self._offset = self.raw_path.stat().st_size if self.raw_path.exists() else 0
            self._proc = self.runner.spawn(loop_argv(self.interval), host=self.host,
                                           stdout=self.raw_path.with_suffix(".part"),
                                           log=self.raw_path.with_suffix(".log"))
            return
        self._thread = threading.Thread(target=self._loop, name=f"sampler-{self.host.name}",
                                        daemon=True)
        self._thread.start()

    def _collect_loop(self) -> None:
        part = self.raw_path.with_suffix(".part")
        text = part.read_text(errors="replace") if part.exists() else ""
        with open(self.raw_path, "a") as raw:
            raw.write(text)
        part.unlink(missing_ok=True)
        for start, end, chunk in split_samples(text):
            self.samples += 1
            t, length = sample_time(start, end)
            if length is not None:
                self._lengths.append(length)
            self._write_rows(cwnd_rows(parse_ss(chunk), t, self.host.name, self.ports,
                                       length))

    def stop(self) -> dict[str, Any]:
        """Stop sampling; return counts (samples, rows, errors), the interval and how
        long one ``ss`` run took (median and longest, s; None without samples)."""
        self._stop.set()
        if self._proc is not None:
            self._proc.stop()
            self._proc = None
            self._collect_loop()
        if self._thread is not None:
            self._thread.join(timeout=15)
        lengths = sorted(self._lengths)
        return {"host": self.host.name, "mode": self.mode, "samples": self.samples,
                "rows": self.rows, "errors": self.errors, "interval_s": self.interval,
                "sample_s_median": round(lengths[len(lengths) // 2], 6) if lengths else None,
                "sample_s_max": round(lengths[-1], 6) if lengths else None}
