"""The reader: formats, link types, fields, chunking, corrupt input."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from craft import (
    CLIENT,
    CLIENT2,
    SERVER,
    T0,
    dss,
    handshake_and_data,
    mp_capable,
    mp_join_syn,
    seg,
    udp,
    write,
)

from analysis import table as T
from analysis.pcap import read_packets
from testbed.core.commands import CommandRunner
from testbed.core.errors import CaptureFormatError


@pytest.fixture()
def pkts():
    return [*handshake_and_data(6), udp(0.5, CLIENT, SERVER, 5000, 6000, 300)]


@pytest.mark.parametrize("fmt,cooked", [("pcap", False), ("pcapng", False), ("pcap", True)])
def test_formats_and_link_types_decode_the_same(tmp_path, pkts, fmt, cooked):
    t = read_packets(write(tmp_path / "c", pkts, fmt=fmt, cooked=cooked))
    assert len(t) == len(pkts)
    c = t.cols
    assert list(c["sport"][:3]) == [40000, 5201, 40000]
    assert list(c["seq"][:3]) == [100, 500, 101]
    assert list(c["tcp_flags"][:3]) == [T.SYN, T.SYN | T.ACK, T.ACK]
    assert c["payload"][3] == 1000 and c["payload"][-1] == 300 and c["proto"][-1] == 17
    assert t.addresses[c["src"][0]] == CLIENT and t.addresses[c["dst"][0]] == SERVER
    assert np.allclose(c["ts_ns"][:2] / 1e9, [T0, T0 + 0.01])
    syn = t.side_frame("syn")
    assert list(syn["mss"]) == [1460, 1460] and list(syn["wscale"]) == [7, -1]


def test_ipv6_timestamps_sack_and_mptcp_options(tmp_path):
    p = [seg(0, "fd00::1", "fd00::2", 1, 2, 10, 0, "S", v6=True, tsval=77,
             options=[mp_capable()]),
         seg(0.1, SERVER, CLIENT, 5201, 40000, 1, 5000, "A",
             options=[("SAck", (6000, 7000, 8000, 9000)), dss(data_ack=2**40 + 5)]),
         seg(0.2, CLIENT, SERVER, 40000, 5201, 5000, 1, "PA", payload=100,
             options=[dss(dsn=2**33 + 7, ssn=4999, dll=100, data_ack=3)]),
         seg(0.3, CLIENT2, SERVER, 40001, 5201, 1, 0, "S",
             options=[mp_join_syn(token=0xDEADBEEF, nonce=42, addr_id=2, backup=True)])]
    t = read_packets(write(tmp_path / "m.pcap", p))
    c = t.cols
    assert c["ip_ver"][0] == 6 and t.addresses[c["src"][0]] == "fd00::1"
    assert c["tsval"][0] == 77 and c["opts"][0] & T.OPT_TS
    assert c["sack_n"][1] == 2
    sack = t.side_frame("sack")
    assert list(zip(sack["left"], sack["right"], strict=True)) == [(6000, 7000), (8000, 9000)]
    assert c["data_ack"][1] == 2**40 + 5 and c["dss_flags"][1] == T.DSS_A | T.DSS_a
    assert (c["dsn"][2], c["ssn"][2], c["dll"][2], c["data_ack"][2]) == (2**33 + 7, 4999, 100, 3)
    j = t.side_frame("mp_join").iloc[0]
    assert (j.pkt, j.token, j.nonce, j.addr_id, j.backup) == (3, 0xDEADBEEF, 42, 2, True)
    assert c["mp_subtypes"][3] == 1 << T.MP_JOIN


def test_chunked_reading_gives_identical_tables(tmp_path):
    pk = handshake_and_data(120, t_step=1e-4)
    path = write(tmp_path / "big.pcap", pk)
    whole = read_packets(path)
    for chunk in (150, 1000, 4096):  # smaller than one record: the buffer grows
        part = read_packets(path, chunk_bytes=chunk)
        for k, v in whole.cols.items():
            assert np.array_equal(v, part.cols[k]), (chunk, k)


def test_truncated_capture_names_file_and_offset(tmp_path, pkts):
    path = write(tmp_path / "t.pcap", pkts)
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    with pytest.raises(CaptureFormatError, match=r"t\.pcap: truncated record at byte offset \d+"):
        read_packets(path)


def test_corrupt_record_length_is_reported(tmp_path, pkts):
    path = write(tmp_path / "bad.pcap", pkts)
    data = bytearray(path.read_bytes())
    data[24 + 8:24 + 12] = (10**7).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(CaptureFormatError, match="byte offset 24"):
        read_packets(path)


def test_not_a_capture(tmp_path):
    path = tmp_path / "x.pcap"
    path.write_text("hello world, this is not a capture")
    with pytest.raises(CaptureFormatError, match="byte offset 0"):
        read_packets(path)


def test_ts_high_bits_change_midway(tmp_path):
    # timestamps crossing a 2^16-second boundary break the fast path; result stays exact
    base = (T0 // 65536 + 1) * 65536 - T0
    pk = [seg(base - 0.5 + k * 0.1, CLIENT, SERVER, 1, 2, k) for k in range(10)]
    t = read_packets(write(tmp_path / "b.pcap", pk))
    assert list(t.cols["seq"]) == list(range(10))


@pytest.mark.skipif(shutil.which("mergecap") is None, reason="mergecap (tshark's package) "
                    "is not installed")
def test_wireshark_pcapng_with_two_link_types(tmp_path, pkts):
    eth = write(tmp_path / "eth.pcap", pkts)
    sll = write(tmp_path / "sll.pcap", [p.copy() for p in pkts[:4]], cooked=True)
    out = tmp_path / "both.pcapng"
    CommandRunner().run(["mergecap", "-F", "pcapng", "-w", str(out), str(eth), str(sll)])
    t = read_packets(out)
    ref = read_packets(eth)
    assert len(t) == len(pkts) + 4 and sorted(set(t.linktypes)) == [1, 113]
    by_iface = {int(i): np.flatnonzero(t.cols["iface"] == i) for i in np.unique(t.cols["iface"])}
    eth_rows = by_iface[t.linktypes.index(1)]
    assert np.array_equal(t.cols["seq"][eth_rows], ref.cols["seq"])
    assert np.array_equal(t.cols["ts_ns"][eth_rows], ref.cols["ts_ns"])
    sll_rows = by_iface[t.linktypes.index(113)]
    assert np.array_equal(t.cols["seq"][sll_rows], ref.cols["seq"][:4])


def _to_big_endian(data: bytes) -> bytes:
    import struct

    out = bytearray(struct.pack(">IHHiIII", *struct.unpack("<IHHiIII", data[:24])))
    pos = 24
    while pos < len(data):
        sec, frac, cl, wl = struct.unpack("<IIII", data[pos:pos + 16])
        out += struct.pack(">IIII", sec, frac, cl, wl) + data[pos + 16:pos + 16 + cl]
        pos += 16 + cl
    return bytes(out)


def test_big_endian_pcap(tmp_path, pkts):
    le = write(tmp_path / "le.pcap", pkts)
    be = tmp_path / "be.pcap"
    be.write_bytes(_to_big_endian(le.read_bytes()))
    a, b = read_packets(le), read_packets(be, chunk_bytes=300)
    for k, v in a.cols.items():
        assert np.array_equal(v, b.cols[k]), k
