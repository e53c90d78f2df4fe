"""benchmarks/sample_time.py: a cwnd sample's time against the ACKs of a capture."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: benchmarks/
from benchmarks.sample_time import Tally, compare

# ACKs at 1.00, 1.10, 1.20 s acknowledging 1, 1449, 2897 (relative, the SYN counted)
TIMES = np.array([1.00, 1.10, 1.20])
ACKS = np.array([1, 1449, 2897])


def test_a_run_that_spans_the_ack_interval_is_consistent_and_its_start_is_not() -> None:
    tally = Tally()
    # ss ran 1.04-1.14: it read 1449, reached at 1.10 -> its start (1.04) is too early
    compare([{"t": 1.09, "sample_s": 0.10, "bytes_acked": 1449}], TIMES, ACKS, tally)
    assert (tally.n, tally.start, tally.middle, tally.run) == (1, 0, 0, 1)
    assert tally.position == [((1.10 + 1.14) / 2 - 1.04) / 0.10]


def test_the_last_count_holds_to_the_end_and_unseen_counts_are_left_out() -> None:
    tally = Tally()
    compare([{"t": 5.0, "sample_s": 0.1, "bytes_acked": 2897},
             {"t": 1.05, "sample_s": 0.1, "bytes_acked": 2000},     # no ACK carried it
             {"t": 1.05, "sample_s": None, "bytes_acked": 1},       # before format 1.8
             {"t": 1.05, "sample_s": 0.1, "bytes_acked": None}], TIMES, ACKS, tally)
    assert (tally.n, tally.timed, tally.start, tally.middle, tally.run) == (2, 1, 2, 1, 1)


def test_a_run_wholly_before_its_count_was_reached_is_inconsistent() -> None:
    tally = Tally()
    compare([{"t": 1.12, "sample_s": 0.04, "bytes_acked": 2897}], TIMES, ACKS, tally)
    assert (tally.n, tally.run, tally.position) == (1, 0, [])
