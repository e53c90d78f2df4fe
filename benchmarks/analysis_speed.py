"""How fast does analysis read a capture, next to tshark and dpkt, on the same file?

Makes a realistic capture (two MPTCP subflows: data segments with timestamps and a DSS
mapping, ACKs with a data ACK and now and then a SACK block; 128-byte snaplen), then times
on one core, in the same run:

* ``analysis.pcap.read_packets`` (what ``testbed analyze`` reads with),
* ``tshark -T fields`` with nine fields,
* dpkt parsing every packet into Ethernet/IP/TCP objects,

and prints packets/s, the speed-up over tshark and the reader's peak memory per packet
(numpy allocations traced while reading, so the read buffer is included).  Rates are given
per CPU-second of the process (children for tshark) -- robust on a shared, busy machine --
and per wall-clock second.

    .venv/bin/python benchmarks/analysis_speed.py [--packets 300000] [--keep FILE]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from analysis import tshark
from analysis.capture import CaptureAnalysis
from analysis.pcap import read_packets
from testbed.commands import CommandRunner

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


def synth_capture(path: Path, packets: int, seed: int = 1) -> int:
    """Write a classic pcap of about `packets` packets; returns the number written.

    path: output file; packets: target count (a multiple of 3 is used); seed: RNG seed.
    """
    rng = np.random.default_rng(seed)
    m = max(packets // 3, 1)                       # pattern: data, data, ack
    rec_d, rec_a = 16 + SNAP, 16 + ACK_HDR
    width = 2 * rec_d + rec_a
    mat = np.zeros((m, width), np.uint8)
    d = np.frombuffer(_frame("data"), np.uint8)
    a = np.frombuffer(_frame("ack"), np.uint8)
    for k in range(2):
        mat[:, 16 + k * rec_d:16 + k * rec_d + len(d)] = d
    mat[:, 2 * rec_d + 16:2 * rec_d + 16 + len(a)] = a
    t = 1_700_000_000.0 + np.cumsum(rng.exponential(2e-5, 3 * m)).reshape(m, 3)
    flow = np.arange(m) % 2                         # two subflows, alternating
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
        seg = 2 * (np.arange(m) // 2) + k           # segment index within the subflow
        data_side = k < 2
        src = np.where(flow == 0, 0x0A000101, 0x0A000201)
        dst = np.full(m, 0x0A000002)
        sp, dp = 40000 + flow, np.full(m, 5201)
        if not data_side:
            src, dst, sp, dp = dst, src, dp, sp
        _put(mat, f + 16, 2, np.full(m, wire - 14))
        _put(mat, f + 18, 2, (3 * np.arange(m) + k) & 0xFFFF)
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
            _put(mat, f + 78, 8, dsn0 + (np.arange(m, dtype=np.uint64) * 2 + k) * MSS)
            _put(mat, f + 86, 4, 1 + seg * MSS)
            _put(mat, f + 90, 2, np.full(m, MSS))
        else:
            _put(mat, f + 70, 8, dsn0 + np.arange(m, dtype=np.uint64) * 2 * MSS)
    # now and then an ACK carries a SACK block in place of its DSS option (same length)
    sack_rows = np.flatnonzero(rng.random(m) < 0.02)
    o = 2 * rec_d + 16 + 66
    sub = mat[sack_rows]
    sub[:, o:o + 12] = np.frombuffer(bytes([1, 1, 5, 10]) + bytes(8), np.uint8)
    sub_left = (1000 + (sack_rows + 4) * MSS) & 0xFFFFFFFF
    tmp = sub[:, o + 4:o + 12]
    tmp[:, :4] = sub_left.astype(">u4").view(np.uint8).reshape(-1, 4)
    tmp[:, 4:] = (sub_left + MSS).astype(">u4").view(np.uint8).reshape(-1, 4)
    sub[:, o + 4:o + 12] = tmp
    mat[sack_rows] = sub
    header = (np.array([0xA1B2C3D4], "<u4").tobytes() + np.array([2, 4], "<u2").tobytes()
              + np.array([0, 0, SNAP, 1], "<u4").tobytes())
    with open(path, "wb") as fh:
        fh.write(header)
        fh.write(mat.tobytes())
    return 3 * m


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


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


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


def main() -> None:
    """Build the capture, time the three readers, print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=300_000)
    ap.add_argument("--keep", type=Path, help="also keep the capture at this path")
    ap.add_argument("--repeat", type=int, default=3, help="best of N for the fast reader")
    args = ap.parse_args()
    _pin_one_core()
    tmp = Path(tempfile.mkdtemp(prefix="analysis-speed-"))
    try:
        cap = args.keep or tmp / "bench.pcap"
        n = synth_capture(cap, args.packets)
        size = cap.stat().st_size
        print(f"capture: {n} packets, {size / 1e6:.1f} MB, snaplen {SNAP}, one core")
        table = read_packets(cap)
        assert len(table) == n, (len(table), n)
        peak = _peak_bytes(lambda: read_packets(cap))
        rows = [("testbed analyze reader (analysis.pcap)",
                 _time(lambda: read_packets(cap), args.repeat)),
                ("  + flows, sequence analysis, metrics", _time(lambda: CaptureAnalysis.of(cap)))]
        ts = None
        if shutil.which("tshark"):
            runner = CommandRunner()
            argv = tshark.fields_argv(cap, tshark.BENCH_FIELDS)
            ts = _time(lambda: runner.run(argv, timeout=3600))
            rows.append(("tshark -T fields (9 fields)", ts))
        else:
            print("tshark is not installed: no tshark row")
        rows.append(("dpkt (Ethernet/IP/TCP objects + options)", _time(lambda: _dpkt_parse(cap))))
        print(f"{'reader':44s} {'pkts/cpu-s':>12s} {'pkts/wall-s':>12s} {'x tshark':>9s}")
        for name, (cpu, wall) in rows:
            x = f"{ts[0] / cpu:9.1f}" if ts else f"{'-':>9s}"
            print(f"{name:44s} {n / cpu:12,.0f} {n / wall:12,.0f} {x}")
        print(f"reader peak memory {peak / n:.1f} bytes/packet (table {table.nbytes / n:.1f}, "
              f"the rest is the read buffer and per-chunk temporaries)")
        print(f"load average during the run: {os.getloadavg()[0]:.2f} "
              f"on {os.cpu_count()} cores")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
