"""Crafted and mutated captures: the reader ends every one in `CaptureFormatError` or a table.

Hand-made cases for each known trap (timestamp resolution overflow, packet blocks before
their interface, IPv6 extension-header chains, truncated blocks, absurd lengths, caplen
lies), then a property-based test that feeds 10,000 mutated captures (bit flips, byte
overwrites, truncations, splices of the valid captures under tests/data) to the reader.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.bundle import build_tables
from analysis.capture import CaptureAnalysis
from analysis.pcap import read_packets
from analysis.pcap_records import MAX_BLOCK_BYTES
from analysis.samples import empty_appflows
from testbed.core.errors import CaptureFormatError, InputError

DATA = Path(__file__).resolve().parents[2] / "data" / "analysis"
SEEDS = [p.read_bytes() for p in sorted(DATA.glob("*.pcap*"))]


def _block(btype: int, body: bytes) -> bytes:
    body += bytes(-len(body) % 4)
    n = len(body) + 12
    return struct.pack("<II", btype, n) + body + struct.pack("<I", n)


def _shb() -> bytes:
    return _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))


def _idb(options: bytes = b"", linktype: int = 1, snaplen: int = 0) -> bytes:
    return _block(1, struct.pack("<HHI", linktype, 0, snaplen) + options)


def _opt(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + value + bytes(-len(value) % 4)


def _epb(data: bytes, units: int = 1_700_000_000_000_000, iface: int = 0,
         caplen: int | None = None) -> bytes:
    cl = len(data) if caplen is None else caplen
    return _block(6, struct.pack("<IIIII", iface, units >> 32, units & 0xFFFFFFFF, cl,
                                 len(data)) + data)


def _spb(data: bytes) -> bytes:
    return _block(3, struct.pack("<I", len(data)) + data)


def _frame_v6(next_header: int, ext: bytes, tail: bytes = b"") -> bytes:
    eth = bytes(12) + b"\x86\xdd"
    ip6 = struct.pack(">IHBB", 6 << 28, len(ext) + len(tail), next_header, 64) + bytes(32)
    return eth + ip6 + ext + tail


def _write(tmp_path: Path, data: bytes, name: str = "c.pcapng") -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _fails(path: Path, match: str) -> None:
    with pytest.raises(CaptureFormatError, match=match) as info:
        read_packets(path)
    msg = str(info.value)
    assert msg.startswith(str(path)) and "\n" not in msg


@pytest.mark.parametrize("resol", [0x7F, 0xFF, 0xC1, 20, 64])
def test_if_tsresol_that_overflows(tmp_path, resol):
    p = _write(tmp_path, _shb() + _idb(_opt(9, bytes([resol]))) + _epb(bytes(60)))
    _fails(p, "if_tsresol")


@pytest.mark.parametrize("resol,units,expect_ns", [
    (0x80 | 30, (5 << 30) + (1 << 29), 5_500_000_000),        # 2^-30 s
    (0x80 | 63, 3 << 62, 1_500_000_000),                      # 2^-63 s: finest binary
    (6, 2_000_001, 2_000_001_000), (19, 10**19 + 5, 10**9)])  # us, 10^-19 s
def test_if_tsresol_in_range(tmp_path, resol, units, expect_ns):
    p = _write(tmp_path, _shb() + _idb(_opt(9, bytes([resol]))) + _epb(bytes(60), units))
    assert int(read_packets(p).cols["ts_ns"][0]) == expect_ns


def test_timestamp_beyond_limit(tmp_path):
    p = _write(tmp_path, _shb() + _idb() + _epb(bytes(60), units=(1 << 64) - 1))
    _fails(p, "timestamp beyond")
    p = _write(tmp_path, _shb() + _idb(_opt(14, struct.pack("<q", -(1 << 62)))) + _epb(b""))
    _fails(p, "if_tsoffset")


def test_simple_packet_block_before_any_interface(tmp_path):
    _fails(_write(tmp_path, _shb() + _spb(bytes(60))), "Simple Packet Block before any "
                                                        "Interface Description Block")
    ok = read_packets(_write(tmp_path, _shb() + _idb() + _spb(bytes(60))))
    assert len(ok) == 1 and ok.cols["caplen"][0] == 60


def test_packet_block_before_any_interface(tmp_path):
    _fails(_write(tmp_path, _shb() + _epb(bytes(60))), "undefined interface")
    pb = _block(2, struct.pack("<HHIIII", 0, 0, 0, 0, 60, 60) + bytes(60))
    _fails(_write(tmp_path, _shb() + pb), "undefined interface")


def test_ipv6_extension_header_chains_are_bounded(tmp_path):
    hop = bytes([0, 0]) + bytes(6)                       # hop-by-hop -> hop-by-hop ...
    tcp = struct.pack(">HHIIBBH", 1, 2, 3, 4, 5 << 4, 0x10, 100) + bytes(4)
    long_chain = _frame_v6(0, hop * 200)                 # far more than the walk follows
    past_end = _frame_v6(0, bytes([0, 255]) + bytes(6))  # claims 2 KB beyond the capture
    ok_chain = _frame_v6(0, bytes([6, 0]) + bytes(6), tcp)
    t = read_packets(_write(tmp_path, _shb() + _idb() + _epb(long_chain) + _epb(past_end)
                            + _epb(ok_chain)))
    assert list(t.cols["sport"]) == [0, 0, 1] and t.cols["proto"][2] == 6


@pytest.mark.parametrize("cut", [1, 4, 11, 30])
def test_truncated_block(tmp_path, cut):
    data = _shb() + _idb() + _epb(bytes(60))
    _fails(_write(tmp_path, data[:-cut]), "truncated|block")


@pytest.mark.parametrize("length", [0, 8, 13, MAX_BLOCK_BYTES + 4, 0xFFFFFFFC])
def test_absurd_block_lengths(tmp_path, length):
    blk = bytearray(_epb(bytes(60)))
    blk[4:8] = struct.pack("<I", length)
    _fails(_write(tmp_path, _shb() + _idb() + bytes(blk) + _epb(bytes(60)) * 50), "block length")


def test_absurd_classic_caplen_in_a_large_file_does_not_grow_the_buffer(tmp_path):
    head = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 128, 1)
    rec = struct.pack("<IIII", 1_700_000_000, 0, 0xFFFFFFF0, 60) + bytes(60)
    p = _write(tmp_path, head + rec + bytes(4 << 20), "big.pcap")
    _fails(p, "claims 4294967280 captured bytes")


def test_caplen_lies(tmp_path):
    # EPB caplen larger than its block; classic caplen larger than snaplen is tolerated
    _fails(_write(tmp_path, _shb() + _idb() + _epb(bytes(60), caplen=1000)), "corrupt Enhanced")
    head = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 32, 1)
    rec = struct.pack("<IIII", 1_700_000_000, 0, 60, 40) + bytes(60)
    t = read_packets(_write(tmp_path, head + rec, "lie.pcap"))
    assert t.cols["caplen"][0] == 60 and t.cols["wirelen"][0] == 40


def test_zero_length_records_end(tmp_path):
    head = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 128, 1)
    rec = struct.pack("<IIII", 1_700_000_000, 0, 0, 0)
    assert len(read_packets(_write(tmp_path, head + rec * 1000, "z.pcap"))) == 1000
    assert len(read_packets(_write(tmp_path, _shb() + _idb() + _epb(b"") * 100))) == 100
    _fails(_write(tmp_path, _shb() + _idb() + _spb(b"")[:-4] + bytes(4)), "block")


def test_unreadable_file(tmp_path):
    d = tmp_path / "dir.pcap"
    d.mkdir()
    _fails(d, "a folder, not a capture file")


@pytest.mark.parametrize(("head", "kind"), [(b"\x1f\x8b\x08\x00", "gzip"),
                                           (b"\x28\xb5\x2f\xfd", "zstd"),
                                           (b"\xfd7zXZ\x00", "xz"), (b"BZh91AY", "bzip2")])
def test_a_compressed_capture_is_named_as_such(tmp_path, head, kind):
    """A .pcap.gz (or zstd, xz, bzip2) is not unpacked because its bytes say so: one line
    names the compression and what to do."""
    f = tmp_path / "run.pcap.gz"
    f.write_bytes(head + bytes(60))
    _fails(f, f"a {kind}-compressed file, not a capture; decompress it first")


# -- property-based: mutated captures ------------------------------------------------------

def _crafted_seed() -> bytes:
    """A small pcapng with the block kinds and options real captures rarely hold."""
    tcp = struct.pack(">HHIIBBH", 1, 2, 3, 4, 8 << 4, 0x18, 100) + bytes(4) \
        + bytes([1, 1, 8, 10]) + bytes(8) + bytes([30, 12, 0x20, 0x03]) + bytes(8)
    v6 = _frame_v6(0, bytes([44, 0]) + bytes(6) + bytes([6, 0]) + bytes(6), tcp)
    pb = _block(2, struct.pack("<HHIIII", 1, 0, 0, 1000, 60, 60) + bytes(60))
    return (_shb() + _idb(_opt(9, bytes([6])) + _opt(14, struct.pack("<q", 5)))
            + _idb(_opt(9, bytes([0x80 | 20])), linktype=101, snaplen=96)
            + _epb(v6) + _spb(v6) + pb + _epb(tcp[:40], iface=1) + _shb() + _idb() + _epb(v6))


SEEDS.append(_crafted_seed())

_INTERESTING = (0x00, 0x01, 0x7F, 0x80, 0xFF)


@st.composite
def mutated_captures(draw) -> tuple[bytes, int]:
    """A valid capture from tests/data, mutated, and the chunk size to read it with."""
    data = bytearray(SEEDS[draw(st.integers(0, len(SEEDS) - 1))])
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "byte", "word", "truncate", "splice", "repeat"]))
        n = len(data)
        if n == 0:
            break
        # positions near the start (file and first block headers) are the likeliest traps
        pos = draw(st.one_of(st.integers(0, min(n - 1, 96)), st.integers(0, n - 1)))
        if kind == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte":
            data[pos] = draw(st.sampled_from(_INTERESTING))
        elif kind == "word":
            v = draw(st.sampled_from([0, 1, 12, 13, 31, 32, 0x7FFFFFFF, 0xFFFFFFFF,
                                      MAX_BLOCK_BYTES + 4, 262145, 6, 3, 2, 1]))
            data[pos:pos + 4] = struct.pack(draw(st.sampled_from(["<I", ">I"])), v)
        elif kind == "truncate":
            del data[pos:]
        elif kind == "splice":
            other = SEEDS[draw(st.integers(0, len(SEEDS) - 1))]
            at = draw(st.integers(0, len(other)))
            data[pos:] = other[at:]
        else:
            ln = draw(st.integers(1, 256))
            data[pos:pos] = data[pos:pos + ln] * draw(st.integers(1, 8))
    chunk = draw(st.sampled_from([1 << 20] * 5 + [4096]))  # small: records across chunks
    return bytes(data), chunk


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang("the reader took more than 10 s on one capture")


@pytest.fixture(scope="module")
def fuzz_file(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz") / "m.pcap"


@settings(max_examples=10_000, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(case=mutated_captures())
def test_mutated_captures_end_in_a_capture_error_or_a_table(fuzz_file, case):
    data, chunk = case
    fuzz_file.write_bytes(data)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, 10)
    try:
        t = read_packets(fuzz_file, chunk_bytes=chunk)
    except CaptureFormatError as exc:
        msg = str(exc)
        assert msg.startswith(str(fuzz_file)) and "\n" not in msg
        return
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert len(t.cols["ts_ns"]) == len(t.cols["caplen"])
    assert np.all(t.cols["caplen"] <= 16 << 20)


@settings(max_examples=100, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(case=mutated_captures())
def test_mutated_captures_through_the_whole_analysis(fuzz_file, case):
    data, chunk = case
    fuzz_file.write_bytes(data)
    with contextlib.suppress(InputError):  # a capture error, or a series beyond its limit
        ca = CaptureAnalysis.of(fuzz_file, chunk)
        build_tables([ca], {}, empty_appflows(), 0.1)


def test_time_series_bins_are_bounded(tmp_path):
    from analysis import series

    # two packets three years apart, 1 ms bins: refused with the limit, not 9e10 rows
    ts = np.array([1_600_000_000 * 10**9, (1_600_000_000 + 3 * 365 * 86400) * 10**9])
    with pytest.raises(series.SeriesLimitError, match=rf"c\.pcap: series k spans .* \(limit "
                       rf"{series.MAX_SERIES_BINS} bins\)"):
        series.throughput_series(ts, np.array([1, 1]), np.array(["k", "k"], object), 0.001,
                                 1.6e9, source="c.pcap")
    ok = series.throughput_series(ts, np.array([1, 1]), np.array(["a", "b"], object), 0.001,
                                  1.6e9)
    assert len(ok) == 2
    with pytest.raises(series.SeriesLimitError, match="bin width"):
        series.throughput_series(ts, np.array([1, 1]), np.array(["k", "k"], object), 0.0, 1.6e9)


def test_progress_reports_bytes_read_of_total(tmp_path):
    import io

    from analysis.pcap import stderr_progress

    data = _shb() + _idb() + _epb(bytes(60)) * 200
    p = _write(tmp_path, data)
    seen = []
    read_packets(p, chunk_bytes=1024, progress=lambda path, done, total: seen.append((done,
                                                                                      total)))
    assert seen[-1] == (len(data), len(data)) and len(seen) > 5
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(seen))
    out = io.StringIO()
    show = stderr_progress(min_bytes=1000, every_s=3600, stream=out)
    read_packets(p, chunk_bytes=1024, progress=show)
    lines = out.getvalue().splitlines()
    assert lines[-1] == f"{p}: 100% (0/0 MB read)" and len(lines) == 2  # first, then the end
    quiet = io.StringIO()
    read_packets(p, progress=stderr_progress(stream=quiet))
    assert quiet.getvalue() == ""


def test_cli_crafted_capture_and_series_limit_are_one_line_exit_2(tmp_path):
    from typer.testing import CliRunner

    from testbed.cli.app import app

    bad = _write(tmp_path, _shb() + _spb(bytes(60)))
    r = CliRunner().invoke(app, ["analyze", str(bad)])
    assert r.exit_code == 2 and "Simple Packet Block before any Interface" in r.output
    assert "Traceback" not in r.output
    ip = _frame_v6(17, b"", struct.pack(">HHHH", 1, 2, 12, 0) + bytes(4))  # a UDP flow
    years = _write(tmp_path, _shb() + _idb() + _epb(ip, 1_600_000_000 * 10**6)
                   + _epb(ip, (1_600_000_000 + 10**8) * 10**6), "years.pcapng")
    r = CliRunner().invoke(app, ["analyze", str(years), "--bin", "0.001"])
    assert r.exit_code == 2 and "limit 1000000 bins" in r.output, r.output


def test_a_link_type_the_analysis_cannot_decode_is_one_line(tmp_path):
    """A capture of link type 147 (or any the decoder does not know) gave 0 flows and no
    word; it is now refused, naming the type and what is read."""
    p = tmp_path / "lt147.pcap"
    p.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 147)
                  + struct.pack("<IIII", 1, 0, 4, 4) + b"abcd")
    with pytest.raises(CaptureFormatError, match="link type 147 is none the analysis "
                                                 r"decodes .*Ethernet"):
        read_packets(p)
    header_only = tmp_path / "lt147-empty.pcap"
    header_only.write_bytes(p.read_bytes()[:24])
    with pytest.raises(CaptureFormatError, match="link type 147"):
        read_packets(header_only)


def test_an_empty_capture_writes_tables_of_the_declared_types(tmp_path):
    """A header-only capture (a switch port nothing crossed) wrote every string and bool
    column of its tables as double, with a warning per column."""
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from testbed.cli.app import app
    from testbed.results.columns import table
    from testbed.results.typed import arrow_type

    p = tmp_path / "empty.pcap"
    p.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    res = CliRunner().invoke(app, ["analyze", str(p), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0 and "warning" not in res.output, res.output
    schema = pq.read_schema(tmp_path / "o" / "flows.parquet")
    declared = {c.name: arrow_type(c.dtype) for c in table("flows").columns}
    assert {f.name: f.type for f in schema if f.name in declared} == \
        {k: v for k, v in declared.items() if k in schema.names}
