"""Cross-checks against tshark 4.x on crafted captures.

Where tshark and analysis disagree, the test pins both answers and says why:

* *quick retransmission*: a resent segment arriving within the first RTT of the highest
  segment is "out-of-order" for tshark (Wireshark issue 13863); its sequence number was
  seen before (and its TSval is the newest), so analysis counts a retransmission.
* *late reordering*: a segment the network delayed by more than the connection's first RTT
  (tshark's out-of-order threshold) is called a retransmission by tshark; its TSval is
  older than that of segments that arrived before it, so it was sent before them and
  analysis calls it reordered (Wireshark issue 13843 / 13863 family).
* *DSN origin*: tshark's relative ``mptcp.dsn`` counts from IDSN (first byte = 1),
  analysis from IDSN + 1 (first byte = 0).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from craft import (
    CLIENT,
    CLIENT_KEY,
    SERVER,
    SERVER_KEY,
    dss,
    handshake_and_data,
    mp_capable,
    mptcp_connection,
    seg,
    udp,
    write,
)

from analysis import tshark
from analysis.capture import CaptureAnalysis
from testbed.core.commands import CommandRunner

pytestmark = pytest.mark.skipif(shutil.which("tshark") is None,
                                reason="tshark is not installed (apt-get install tshark)")

FLAGS = ("tcp.analysis.retransmission", "tcp.analysis.out_of_order")


def _tshark(path, fields, prefs=()):
    res = CommandRunner().run(tshark.fields_argv(path, fields, prefs), timeout=60)
    return tshark.parse_fields(res.stdout, fields)


def _flag_counts(path):
    df = _tshark(path, ("frame.number", *FLAGS))
    return {f: int((df[f] != "").sum()) for f in FLAGS}


def _with_ts(pkts, tsvals):
    """Give each data segment (payload) a TSval from tsvals, in packet order."""
    out, k = [], 0
    for p in pkts:
        if len(p["TCP"].payload):
            p["TCP"].options = [("NOP", None), ("NOP", None), ("Timestamp", (tsvals[k], 0))]
            k += 1
        out.append(p.__class__(bytes(p)))
        out[-1].time = p.time
    return out


def test_reordering_matches_tshark_out_of_order(tmp_path):
    path = write(tmp_path / "r.pcap", handshake_and_data(10, order=[0, 1, 3, 2, 4, 5, 9, 6, 7, 8]))
    ca = CaptureAnalysis.of(path)
    row = ca.flow_rows.iloc[0]
    counts = _flag_counts(path)
    assert row["reordered_packets"] == counts["tcp.analysis.out_of_order"] == 4
    assert row["retransmissions"] == counts["tcp.analysis.retransmission"] == 0


def test_retransmission_matches_tshark(tmp_path):
    # sender-side view: segment 3 sent twice (same sequence number, later TSval); gaps of
    # 30 ms exceed tshark's out-of-order threshold (the first RTT, 20 ms)
    order = [0, 1, 2, 3, 4, 5, 3, 6, 7]
    pkts = handshake_and_data(8, order=order, t_step=0.03)
    path = write(tmp_path / "x.pcap", _with_ts(pkts, list(range(100, 100 + len(order)))))
    row = CaptureAnalysis.of(path).flow_rows.iloc[0]
    counts = _flag_counts(path)
    assert row["retransmissions"] == counts["tcp.analysis.retransmission"] == 1
    assert row["reordered_packets"] == counts["tcp.analysis.out_of_order"] == 0


def test_loss_before_receiver_capture_is_a_retransmission_for_both(tmp_path):
    # receiver-side view: the first copy of segment 3 was lost upstream; the copy that
    # arrives 50 ms later carries a newer TSval
    order = [0, 1, 2, 4, 5, 6, 3]
    pkts = handshake_and_data(7, order=order, t_step=0.03)
    tsv = [100, 101, 102, 104, 105, 106, 150]
    path = write(tmp_path / "l.pcap", _with_ts(pkts, tsv))
    row = CaptureAnalysis.of(path).flow_rows.iloc[0]
    counts = _flag_counts(path)
    assert row["retransmissions"] == counts["tcp.analysis.retransmission"] == 1
    assert row["reordered_packets"] == counts["tcp.analysis.out_of_order"] == 0
    assert row["loss_estimate"] == pytest.approx(1 / 6)  # 1 resent of 6 unique segments


def test_quick_retransmission_tshark_calls_it_out_of_order(tmp_path):
    # documented disagreement (Wireshark issue 13863): a retransmission that arrives within
    # one first-RTT of the highest segment is flagged out-of-order by tshark, though its
    # sequence number was seen before and its TSval is the newest
    order = [0, 1, 2, 3, 4, 5, 3, 6, 7]
    pkts = handshake_and_data(8, order=order, t_step=0.01)
    path = write(tmp_path / "q.pcap", _with_ts(pkts, list(range(100, 100 + len(order)))))
    row = CaptureAnalysis.of(path).flow_rows.iloc[0]
    counts = _flag_counts(path)
    assert counts["tcp.analysis.out_of_order"] == 1 and counts[FLAGS[0]] == 0
    assert row["retransmissions"] == 1 and row["reordered_packets"] == 0


def test_late_reordering_tshark_calls_it_a_retransmission(tmp_path):
    # documented disagreement: segment 3 delayed 60 ms (> first RTT 20 ms) by the network;
    # its TSval (103) is older than those that arrived before it, so it was not resent
    order = [0, 1, 2, 4, 5, 6, 3]
    pkts = handshake_and_data(7, order=order, t_step=0.02)
    path = write(tmp_path / "late.pcap", _with_ts(pkts, [100, 101, 102, 104, 105, 106, 103]))
    row = CaptureAnalysis.of(path).flow_rows.iloc[0]
    counts = _flag_counts(path)
    assert counts["tcp.analysis.retransmission"] == 1      # tshark: timing heuristic
    assert counts["tcp.analysis.out_of_order"] == 0
    assert row["reordered_packets"] == 1                   # analysis: sender's timestamps
    assert row["retransmissions"] == 0


def test_frame_and_byte_counts_match_tshark_conversations(tmp_path):
    pk = [*handshake_and_data(12), udp(0.2, CLIENT, SERVER, 5000, 6000, 300),
          udp(0.3, SERVER, CLIENT, 6000, 5000, 200), udp(0.4, CLIENT, SERVER, 5000, 6000, 100),
          seg(0.5, "10.0.9.1", SERVER, 1234, 80, 77, 1, "PA", payload=50)]  # no SYN seen
    path = write(tmp_path / "c.pcap", pk)
    rows = CaptureAnalysis.of(path).flow_rows
    runner = CommandRunner()
    for proto in ("tcp", "udp"):
        conv = tshark.parse_conv(runner.run(tshark.conv_argv(path, proto)).stdout)
        mine = rows[rows["proto"] == proto]
        assert len(conv) == len(mine)
        for _, r in mine.iterrows():
            a, b = f"{r.src_addr}:{r.sport}", f"{r.dst_addr}:{r.dport}"
            c = conv[((conv.a == a) & (conv.b == b)) | ((conv.a == b) & (conv.b == a))].iloc[0]
            fwd, rev = (("frames_ab", "frames_ba") if c.a == a else ("frames_ba", "frames_ab"))
            assert (r.frames_fwd, r.frames_rev) == (c[fwd], c[rev])
    # exact byte sums (conv rounds to kB): frame.len per stream and direction
    df = _tshark(path, ("ip.src", "tcp.srcport", "udp.srcport", "frame.len"))
    df["port"] = (df["tcp.srcport"] + df["udp.srcport"]).astype(int)
    df["len"] = df["frame.len"].astype(int)
    sums = df.groupby(["ip.src", "port"])["len"].sum()
    for _, r in rows.iterrows():
        assert r.frame_bytes_fwd == sums[(r.src_addr, r.sport)]
        assert r.frame_bytes_rev == sums.get((r.dst_addr, r.dport), 0)
    nosyn = rows[rows["sport"] == 1234].iloc[0]
    assert not nosyn.syn_seen and nosyn.bytes == 50


def test_mptcp_grouping_and_dsn_match_tshark(tmp_path):
    path = write(tmp_path / "m.pcap", mptcp_connection([0, 1, 2, 4, 3, 5, 7, 6]))
    ca = CaptureAnalysis.of(path)
    prefs = ("mptcp.analyze_mappings:TRUE", "mptcp.relative_sequence_numbers:TRUE")
    df = _tshark(path, ("frame.number", "tcp.stream", "mptcp.stream", "mptcp.dsn", "tcp.len"),
                 prefs)
    # same subflow -> connection partition
    flows = ca.flows.flows
    ours = {int(f): flows.loc[int(f), "mptcp_token"] for f in ca.flows.pkt_flow}
    theirs = dict(zip(df["tcp.stream"].astype(int), df["mptcp.stream"], strict=True))
    assert len(set(ours.values())) == 1 and ours[0] != ""
    assert len({v for v in theirs.values() if v}) == 1
    assert list(flows["mptcp_role"]) == ["initial", "join"]
    # per-packet DSN: tshark's relative DSN = ours + 1 (origin IDSN vs IDSN + 1)
    data = df[df["tcp.len"].astype(int) > 0]
    dsn = ca.dsn.sort_values("ts")
    assert list(data["mptcp.dsn"].astype(int)) == list(dsn["dsn"] + 1)
    # data-level reordering, which tshark lacks: recomputed from tshark's DSNs
    d = data["mptcp.dsn"].astype(int).to_numpy()
    behind = d < np.maximum.accumulate(np.r_[0, d[:-1] + 1000])
    assert int(behind.sum()) == int(dsn["reordered"].sum()) == 2
    conn = ca.connections.iloc[0]
    assert conn["dsn_reordered_packets"] == 2 and conn["data_bytes"] == 8000


def test_data_on_mp_capable_third_ack_matches_tshark(tmp_path):
    # MPTCP v1 lets the first data ride on the third ACK's MP_CAPABLE (implicit mapping)
    from analysis.flows import key_token

    idsn = key_token(CLIENT_KEY)[1]
    a, s = (CLIENT, 40000), (SERVER, 5201)
    pk = [seg(0.00, a[0], s[0], a[1], s[1], 1000, 0, "S", options=[mp_capable()]),
          seg(0.01, s[0], a[0], s[1], a[1], 7000, 1001, "SA", options=[mp_capable(SERVER_KEY)]),
          seg(0.02, a[0], s[0], a[1], s[1], 1001, 7001, "PA", payload=500,
              options=[mp_capable(CLIENT_KEY, SERVER_KEY, data_len=500)]),
          seg(0.03, a[0], s[0], a[1], s[1], 1501, 7001, "PA", payload=700,
              options=[dss(dsn=idsn + 501, ssn=501, dll=700)])]
    path = write(tmp_path / "mc.pcap", pk)
    ca = CaptureAnalysis.of(path)
    df = _tshark(path, ("tcp.len", "mptcp.dsn"), ("mptcp.analyze_mappings:TRUE",))
    theirs = df[df["tcp.len"].astype(int) > 0]["mptcp.dsn"].astype(int).tolist()
    assert list(ca.dsn["dsn"] + 1) == theirs == [1, 501]
    assert ca.connections.iloc[0]["data_bytes"] == 1200
