"""How fast and in how much memory does analysis turn captures into tables, next to tshark?

Makes realistic captures (two MPTCP subflows: data segments with timestamps and a DSS
mapping, ACKs with a data ACK and now and then a SACK block; 128-byte snaplen) of 1 M and
10 M packets, and times each stage on one core, each in a fresh process so that its peak
resident memory (RSS, which includes the Python interpreter and its imports, about 100 MB)
is its own:

* the reader alone: every chunk read and decoded, nothing kept (`analysis.pcap.iter_records`
  + `analysis.decode.decode`);
* the reader building the packet table (`analysis.pcap.read_packets`);
* the whole pipeline: `analysis.bundle.analyze_bundle` on a bundle holding the capture --
  flows, sequence analysis, reordering, RTT, MPTCP data level, time series, every
  ``metrics/*.parquet`` written;
* the whole pipeline once more with ``NUMPY_MADVISE_HUGEPAGE=0`` (numpy's documented switch:
  no ``madvise(MADV_HUGEPAGE)`` on its arrays of 4 MB or more, which numpy otherwise
  gives where transparent huge pages are ``madvise``, Debian's default): how much of the
  kernel's share comes from huge pages;
* ``tshark -T fields`` with nine fields (only on captures up to ``--tshark-max`` packets:
  it reads about 50 k packets/s, so 10 M packets would take over 3 minutes).

Each stage runs in ``--repeat`` fresh processes (default 3) and the one with the least CPU
time is shown, with the median run's rate in the last column.  Rates are per CPU-second
of the process (robust on a shared, busy machine) and per wall-clock second; "kernel %"
is the share of that CPU time spent in the kernel, mostly page faults on freshly
allocated memory (it grows with the memory a stage touches).

    .venv/bin/python benchmarks/analysis_speed.py [--packets 1000000 10000000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from analysis import tshark
from analysis.pcap import read_packets
from testbed.core.commands import CommandRunner

SNAP = 128
DATA_HDR = 14 + 20 + 20 + 40      # Ethernet, IPv4, TCP, options (TS + DSS map + ack)
ACK_HDR = 14 + 20 + 20 + 24       # TS + DSS data ACK
MSS = 1448


def _put(mat: np.ndarray, col: int, nbytes: int, values) -> None:
    """Write big-endian unsigned values into columns col..col+nbytes of every row."""
    v = np.asarray(values).astype(f">u{nbytes}")
    mat[:, col:col + nbytes] = v.view(np.uint8).reshape(-1, nbytes)


def _frame(kind: str) -> bytes:
    eth = bytes.fromhex("020000000002" "020000000001" "0800")
    ip = bytes.fromhex("4500" "0000" "0000" "4000" "4006" "0000") + bytes(8)
    tcp = bytes(12) + bytes([(20 + (40 if kind == "data" else 24)) // 4 << 4, 0x18]) + bytes(6)
    ts = bytes([1, 1, 8, 10]) + bytes(8)
    if kind == "data":  # DSS: A a M m, 8-octet data ACK and DSN, SSN, data-level length
        opts = ts + bytes([30, 26, 0x20, 0x0F]) + bytes(22) + bytes([1, 1])
    else:
        opts = ts + bytes([30, 12, 0x20, 0x03]) + bytes(8)
    return eth + ip + tcp + opts


def synth_capture(path: Path, packets: int, seed: int = 1, block: int = 300_000) -> int:
    """Write a classic pcap of about `packets` packets; returns the number written.

    path: output file; packets: target count (a multiple of 3 is used); seed: RNG seed;
    block: packets generated at a time (memory stays flat for captures of any size).
    """
    rng = np.random.default_rng(seed)
    total = max(packets // 3, 1)                   # pattern: data, data, ack
    header = (np.array([0xA1B2C3D4], "<u4").tobytes() + np.array([2, 4], "<u2").tobytes()
              + np.array([0, 0, SNAP, 1], "<u4").tobytes())
    t_end = 1_700_000_000.0
    step = max(block // 6 * 2, 2)
    with open(path, "wb") as fh:
        fh.write(header)
        for m0 in range(0, total, step):
            mat, t_end = _synth_block(rng, m0, min(step, total - m0), t_end)
            fh.write(mat.tobytes())
    return 3 * total


def _synth_block(rng: np.random.Generator, m0: int, m: int, t_start: float
                 ) -> tuple[np.ndarray, float]:
    """Records m0 .. m0 + m of the data-data-ack pattern, as an (m, record bytes) matrix."""
    idx = m0 + np.arange(m)
    rec_d, rec_a = 16 + SNAP, 16 + ACK_HDR
    width = 2 * rec_d + rec_a
    mat = np.zeros((m, width), np.uint8)
    d = np.frombuffer(_frame("data"), np.uint8)
    a = np.frombuffer(_frame("ack"), np.uint8)
    for k in range(2):
        mat[:, 16 + k * rec_d:16 + k * rec_d + len(d)] = d
    mat[:, 2 * rec_d + 16:2 * rec_d + 16 + len(a)] = a
    t = t_start + np.cumsum(rng.exponential(2e-5, 3 * m)).reshape(m, 3)
    flow = idx % 2                         # two subflows, alternating
    dsn0 = np.uint64(0x1122334455667788)
    for k in range(3):
        o = [0, rec_d, 2 * rec_d][k]
        caplen = SNAP if k < 2 else ACK_HDR
        wire = DATA_HDR + MSS if k < 2 else ACK_HDR
        sec = np.floor(t[:, k])

        def _put_le(col: int, vals, o: int = o) -> None:
            mat[:, o + col:o + col + 4] = np.asarray(vals).astype("<u4").view(
                np.uint8).reshape(-1, 4)
        _put_le(0, sec)
        _put_le(4, np.round((t[:, k] - sec) * 1e6).clip(0, 999_999))
        _put_le(8, np.full(m, caplen))
        _put_le(12, np.full(m, wire))
        f = o + 16
        seg = 2 * (idx // 2) + k           # segment index within the subflow
        data_side = k < 2
        src = np.where(flow == 0, 0x0A000101, 0x0A000201)
        dst = np.full(m, 0x0A000002)
        sp, dp = 40000 + flow, np.full(m, 5201)
        if not data_side:
            src, dst, sp, dp = dst, src, dp, sp
        _put(mat, f + 16, 2, np.full(m, wire - 14))
        _put(mat, f + 18, 2, (3 * idx + k) & 0xFFFF)
        _put(mat, f + 26, 4, src)
        _put(mat, f + 30, 4, dst)
        _put(mat, f + 34, 2, sp)
        _put(mat, f + 36, 2, dp)
        _put(mat, f + 38, 4, (1000 + seg * MSS) & 0xFFFFFFFF if data_side else np.full(m, 1))
        _put(mat, f + 42, 4, np.full(m, 1) if data_side else (1000 + seg * MSS) & 0xFFFFFFFF)
        _put(mat, f + 48, 2, np.full(m, 502))
        tsv = (t[:, k] * 1000).astype(np.int64) & 0xFFFFFFFF
        _put(mat, f + 58, 4, tsv)
        _put(mat, f + 62, 4, tsv - 20)
        if data_side:
            _put(mat, f + 70, 8, np.full(m, 0x99AABBCC, np.uint64))
            _put(mat, f + 78, 8, dsn0 + (idx.astype(np.uint64) * 2 + k) * MSS)
            _put(mat, f + 86, 4, 1 + seg * MSS)
            _put(mat, f + 90, 2, np.full(m, MSS))
        else:
            _put(mat, f + 70, 8, dsn0 + idx.astype(np.uint64) * 2 * MSS)
    # now and then an ACK carries a SACK block in place of its DSS option (same length)
    sack_rows = np.flatnonzero(rng.random(m) < 0.02)
    o = 2 * rec_d + 16 + 66
    sub = mat[sack_rows]
    sub[:, o:o + 12] = np.frombuffer(bytes([1, 1, 5, 10]) + bytes(8), np.uint8)
    sub_left = (1000 + (m0 + sack_rows + 4) * MSS) & 0xFFFFFFFF
    tmp = sub[:, o + 4:o + 12]
    tmp[:, :4] = sub_left.astype(">u4").view(np.uint8).reshape(-1, 4)
    tmp[:, 4:] = (sub_left + MSS).astype(">u4").view(np.uint8).reshape(-1, 4)
    sub[:, o + 4:o + 12] = tmp
    mat[sack_rows] = sub
    return mat, float(t[-1, 2])


def _pin_one_core() -> None:
    if hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[-1]})


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _time(fn, repeat: int = 1) -> tuple[float, float]:
    """Best (cpu seconds, wall seconds) of `repeat` calls of fn."""
    cpu, wall = float("inf"), float("inf")
    for _ in range(repeat):
        c0, t0 = _cpu(), time.perf_counter()
        fn()
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, _cpu() - c0)
    return cpu, wall


def _dpkt_parse(path: Path) -> int:
    import dpkt

    n = 0
    with open(path, "rb") as fh:
        for _ts, raw in dpkt.pcap.Reader(fh):
            eth = dpkt.ethernet.Ethernet(raw)
            ip = eth.data
            if isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP):
                _ = (ip.src, ip.dst, ip.data.sport, ip.data.dport, ip.data.seq, ip.data.ack,
                     dpkt.tcp.parse_opts(ip.data.opts))
            n += 1
    return n


def _bundle(cap: Path, where: Path) -> Path:
    """A minimal run bundle holding cap (hard-linked when possible) for analyze_bundle."""
    run = where / f"run-{cap.stem}"
    (run / "pcap").mkdir(parents=True, exist_ok=True)
    dst = run / "pcap" / "server-server-eth0.pcap"
    if not dst.exists():
        try:
            os.link(cap, dst)
        except OSError:
            shutil.copyfile(cap, dst)
    (run / "metadata.json").write_text(json.dumps({
        "t0": 1_700_000_000.0, "interfaces": {
            "server-eth0": {"host": "server", "path": "p0", "addr": "10.0.0.2"},
            "client-eth0": {"host": "client", "path": "p0", "addr": "10.0.1.1"},
            "client-eth1": {"host": "client", "path": "p1", "addr": "10.0.2.1"}}}))
    return run


def _stream_decode(cap: Path) -> int:
    """Decode every chunk of cap and keep nothing: the reader's own speed and memory."""
    from analysis import decode as D
    from analysis.pcap import iter_records

    n = 0
    for buf, recs, state in iter_records(cap):
        D.decode(buf, recs.data, recs.caplen, state.ifaces[0].linktype)
        n += len(recs.data)
    return n


def _peak_rss_mb() -> float:
    """Peak resident memory of this process (MB): VmHWM, which, unlike ru_maxrss, does not
    carry over the high-water mark of the parent that forked this process."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(stage: str, cap: Path) -> dict:
    """Run one stage on cap in this process; return cpu/wall seconds and peak RSS (MB)."""
    _pin_one_core()
    import pandas  # noqa: F401  (imports are not what is measured)

    from analysis.bundle import analyze_bundle
    from analysis.capture import CaptureAnalysis  # noqa: F401

    base_rss = _peak_rss_mb()
    if stage == "decode":
        fn = lambda: _stream_decode(cap)  # noqa: E731
    elif stage == "reader":
        fn = lambda: read_packets(cap)  # noqa: E731
    else:
        run = _bundle(cap, cap.parent)
        fn = lambda: analyze_bundle(run)  # noqa: E731
    sys0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
    cpu, wall = _time(fn)
    kernel = resource.getrusage(resource.RUSAGE_SELF).ru_stime - sys0
    peak = _peak_rss_mb()
    return {"cpu": cpu, "wall": wall, "rss_mb": peak, "base_rss_mb": base_rss,
            "kernel_share": kernel / cpu if cpu > 0 else 0.0}


STAGES = (("decode", "reader: decode every chunk, keep nothing", {}),
          ("reader", "reader: read_packets -> packet table", {}),
          ("pipeline", "pipeline: analyze_bundle, every table", {}),
          # the same, with numpy's transparent-huge-page advice off (see the docstring)
          ("pipeline", "pipeline, NUMPY_MADVISE_HUGEPAGE=0", {"NUMPY_MADVISE_HUGEPAGE": "0"}))


def main() -> int:
    """Build the captures, time each stage in a fresh process, print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, nargs="+", default=[1_000_000, 10_000_000],
                    help="capture sizes to measure (packets)")
    ap.add_argument("--dir", type=Path, help="where to write the captures (default: a "
                    "temporary folder, removed at the end)")
    ap.add_argument("--tshark-max", type=int, default=2_000_000,
                    help="run tshark only on captures of at most this many packets")
    ap.add_argument("--repeat", type=int, default=3,
                    help="fresh processes per stage; the one with the least CPU time is shown "
                    "(other work on a shared machine only ever slows a run down)")
    ap.add_argument("--dpkt", action="store_true", help="also time dpkt")
    ap.add_argument("--measure", nargs=2, metavar=("STAGE", "CAPTURE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure[0], Path(args.measure[1]))))
        return 0
    _pin_one_core()
    tmp = Path(tempfile.mkdtemp(prefix="analysis-speed-", dir=args.dir))
    runner = CommandRunner()
    unmeasured = []
    try:
        print(f"{'capture':>12s}  {'stage':42s} {'pkts/cpu-s':>11s} {'pkts/wall-s':>11s} "
              f"{'RSS MB (+ over imports)':>14s} {'x tshark':>8s} {'kernel %':>8s} "
              f"{'median pkts/cpu-s':>14s}")
        for want in args.packets:
            cap = tmp / f"bench-{want}.pcap"
            n = synth_capture(cap, want)
            label = f"{n / 1e6:.1f} M pkts"
            rows = []
            for stage, name, env in STAGES:
                runs = []
                for _ in range(args.repeat):  # each in a fresh process; the fastest counts
                    out = runner.run([sys.executable, __file__, "--measure", stage, str(cap)],
                                     timeout=7200, record=False,
                                     env={**os.environ, **env}).stdout
                    runs.append(json.loads(out.strip().splitlines()[-1]))
                r = min(runs, key=lambda x: x["cpu"])
                mid = sorted(x["cpu"] for x in runs)[len(runs) // 2]
                rows.append((name, r["cpu"], r["wall"],
                             f"{r['rss_mb']:5.0f} (+{r['rss_mb'] - r['base_rss_mb']:4.0f})",
                             f"{100 * r['kernel_share']:8.0f} {n / mid:14,.0f}"))
            ts = None
            if not shutil.which("tshark"):
                rows.append(("tshark -T fields (9 fields)", None, None,
                             "n/a: tshark is not installed (apt-get install tshark)", ""))
                unmeasured.append(f"{label}: tshark is not installed")
            elif n > args.tshark_max:
                rows.append(("tshark -T fields (9 fields)", None, None,
                             f"skipped (> --tshark-max {args.tshark_max})", ""))
            else:
                argv = tshark.fields_argv(cap, tshark.BENCH_FIELDS)
                ts = _time(lambda argv=argv: runner.run(argv, timeout=7200, record=False))
                rows.append(("tshark -T fields (9 fields)", ts[0], ts[1], f"{'-':>12s}",
                             f"{'-':>8s}"))
            if args.dpkt:
                cpu, wall = _time(lambda cap=cap: _dpkt_parse(cap))
                rows.append(("dpkt (Ethernet/IP/TCP objects + options)", cpu, wall,
                             f"{'-':>12s}", f"{'-':>8s}"))
            for name, cpu, wall, rss, kernel in rows:
                if cpu is None:
                    print(f"{label:>12s}  {name:42s} {rss}")
                    continue
                x = f"{ts[0] / cpu:8.1f}" if ts else f"{'-':>8s}"
                print(f"{label:>12s}  {name:42s} {n / cpu:11,.0f} {n / wall:11,.0f} {rss} {x} "
                      f"{kernel}")
            cap.unlink()
            shutil.rmtree(tmp / f"run-{cap.stem}", ignore_errors=True)
        print(f"one core; load average at the end {os.getloadavg()[0]:.2f} on "
              f"{os.cpu_count()} cores")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if unmeasured:
        print(f"analysis_speed: {len(unmeasured)} cell(s) not measured: "
              f"{'; '.join(unmeasured)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
