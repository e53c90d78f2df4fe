"""analysis.order: arrival order at the receiver against send order at the sender."""

from __future__ import annotations

import numpy as np

from analysis.order import late_arrivals, ooo_table, segment_keys


def keys(*seqs: int) -> np.ndarray:
    return segment_keys(np.array(seqs, np.int64), np.full(len(seqs), 100))


def test_in_order_is_zero():
    assert late_arrivals(keys(1, 101, 201), keys(1, 101, 201)) == (3, 0)


def test_one_overtaken_segment():
    # 101 sent before 201 and 301, arrives after both: one late segment
    assert late_arrivals(keys(1, 101, 201, 301), keys(1, 201, 301, 101)) == (4, 1)


def test_a_segment_that_jumps_ahead_makes_the_others_late():
    # 301 arrives first: 1, 101 and 201 each arrive after a segment sent later
    assert late_arrivals(keys(1, 101, 201, 301), keys(301, 1, 101, 201)) == (4, 3)


def test_retransmissions_are_not_counted():
    # 101 was sent twice (dropped, then retransmitted after 201 and 301): it is neither
    # counted nor late, and it does not make the segments after it late
    sent = keys(1, 101, 201, 301, 101)
    received = keys(1, 201, 301, 101)
    assert late_arrivals(sent, received) == (3, 0)


def test_segments_the_receiver_never_saw_and_missing_captures():
    assert late_arrivals(keys(1, 101, 201), keys(1, 201)) == (2, 0)
    assert late_arrivals(keys(), keys(1)) == (0, 0)
    assert late_arrivals(keys(1), keys()) == (0, 0)


def test_same_sequence_other_length_is_another_segment():
    sent = segment_keys(np.array([1, 1]), np.array([100, 50]))
    assert late_arrivals(sent, sent[::-1]) == (2, 1)


def test_table_nulls_without_segments():
    t = ooo_table([("a", keys(1, 101), keys(101, 1)), ("b", keys(), keys())])
    assert t.loc[0, "ooo_packets"] == 1 and t.loc[0, "ooo_ratio"] == 0.5
    assert np.isnan(t.loc[1, "ooo_ratio"]) and t.loc[1, "ooo_counted"] == 0
