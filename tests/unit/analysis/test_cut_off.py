"""A TCP flow cut off (no captured ACK covers its last data byte: an outage, the run's
end) has no FCT, and its throughput is what its receiver acknowledged, not what it sent
(P0's quick outage read 4.16 Mbit/s on a 4 Mbit/s link before this rule)."""

from __future__ import annotations

import pytest
from craft import CLIENT, SERVER, handshake_and_data, seg, write

from analysis.capture import CaptureAnalysis


def _flow(tmp_path, packets):
    path = write(tmp_path / "c.pcap", packets)
    rows = CaptureAnalysis.of(path).flow_rows
    assert len(rows) == 1
    return rows.iloc[0]


def test_a_finished_flow_keeps_its_fct(tmp_path):
    r = _flow(tmp_path, handshake_and_data(10))
    assert r["fct_s"] == pytest.approx(r["end"] - r["start"])
    assert r["throughput_bps"] == pytest.approx(10_000 * 8 / r["fct_s"])


def test_a_flow_cut_off_has_no_fct_and_counts_what_was_acknowledged(tmp_path):
    full = handshake_and_data(10, t_step=0.01)
    sent = full[:13]  # the handshake and 10 data segments, then the link went down
    # the receiver acknowledged the first 6 000 bytes at t = 0.09 s, and nothing more
    ack = seg(0.09, SERVER, CLIENT, 5201, 40000, 501, 101 + 6000, "A")
    retry = seg(0.5, CLIENT, SERVER, 40000, 5201, 101 + 6000, 501, "PA", payload=1000)
    r = _flow(tmp_path, [*sent[:9], ack, *sent[9:], retry])
    assert r["bytes"] == 10_000                       # what it sent, as before
    assert r["fct_s"] != r["fct_s"]                   # null: it never finished
    assert r["end"] - r["start"] == pytest.approx(0.5)  # its last captured packet
    assert r["throughput_bps"] == pytest.approx(6000 * 8 / 0.09, rel=1e-5)  # µs stamps


def test_only_the_handshake_back_cannot_tell(tmp_path):
    """The receiver's SYN/ACK captured, none of its ACKs of data (a switch port on an
    asymmetric path, or a flow cut before any ACK): not called cut off, as it may have
    delivered everything; the old reading, to the last packet."""
    sent = handshake_and_data(4)[:7]
    r = _flow(tmp_path, sent)
    assert r["fct_s"] == pytest.approx(r["end"] - r["start"], rel=1e-5)  # µs stamps
    assert r["throughput_bps"] == pytest.approx(4000 * 8 / r["fct_s"])


def test_a_one_way_capture_cannot_tell_and_keeps_the_old_reading(tmp_path):
    """Only the data direction captured (no ACK of the receiver at all): not called cut
    off; fct_s and throughput_bps run to the last packet, as for any capture without ACKs."""
    one_way = [p for p in handshake_and_data(10, t_step=0.01) if p["IP"].src == CLIENT]
    r = _flow(tmp_path, one_way)
    assert r["fct_s"] == pytest.approx(r["end"] - r["start"])
    assert r["throughput_bps"] == pytest.approx(10_000 * 8 / r["fct_s"])
