"""The coupled controls' reference models (testbed.host.coupled.reference): the published
rules on hand-worked cases, and the BPF programs' integer arithmetic against them."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.core.errors import InputError
from testbed.host.coupled.reference import (
    FP,
    Subflow,
    balia_increase,
    balia_window_after_loss,
    check_trace,
    decide,
    lia_increase,
    olia_alpha,
    olia_increase,
    wvegas_round,
)
from testbed.host.coupled.trace import parse_dump

# two subflows: 10 segments at 10 ms and 10 segments at 40 ms
TWO = [Subflow(10, 10), Subflow(10, 40)]


def test_lia_hand_worked() -> None:
    # sum w/rtt = 1 + 0.25 = 1.25; max w/rtt^2 = 10/100 = 0.1; 0.1 / 1.25^2 = 0.064
    # (RFC 6356: alpha = cwnd_total * 0.1 / 1.25^2 = 1.28, alpha / cwnd_total = 0.064)
    assert lia_increase(TWO, 0) == pytest.approx(0.064)
    assert lia_increase(TWO, 1) == pytest.approx(0.064)      # the same coupled term
    # one subflow: LIA is NewReno (1/w per acknowledged segment)
    assert lia_increase([Subflow(10, 10)], 0) == pytest.approx(0.1)
    # the cap 1/w_i binds for a small window next to a large one on a faster path
    assert lia_increase([Subflow(2, 100), Subflow(50, 10)], 0) == pytest.approx(
        min((50 / 100) / (2 / 100 + 50 / 10) ** 2, 1 / 2))
    # two equal paths: the connection grows by 1/2 segment per RTT in total
    eq = [Subflow(10, 10), Subflow(10, 10)]
    assert 2 * 10 * lia_increase(eq, 0) == pytest.approx(0.5)


def test_olia_hand_worked() -> None:
    # w = 10, 20 at 10 ms; l = 100, 50 KiB.  M = {1} (largest window); B = {0} (largest
    # l^2/rtt); B\\M = {0}: alpha_0 = 1/(2*1) = 0.5, alpha_1 = -1/(2*1) = -0.5.
    subs = [Subflow(10, 10, 100, 0), Subflow(20, 10, 50, 0)]
    assert olia_alpha(subs, 0) == 0.5 and olia_alpha(subs, 1) == -0.5
    # sum w/rtt = 3: (10/100)/9 + 0.5/10 and (20/100)/9 - 0.5/20
    assert olia_increase(subs, 0) == pytest.approx(0.1 / 9 + 0.05)
    assert olia_increase(subs, 1) == pytest.approx(0.2 / 9 - 0.025)
    # the best path also has the largest window: no re-balancing (alpha = 0)
    same = [Subflow(20, 10, 100, 0), Subflow(10, 10, 50, 0)]
    assert olia_alpha(same, 0) == olia_alpha(same, 1) == 0
    # l is the larger of the two loss intervals
    assert olia_alpha([Subflow(10, 10, 0, 100), Subflow(20, 10, 50, 0)], 0) == 0.5


def test_balia_hand_worked() -> None:
    # x = 1, 2 (per ms); alpha_0 = 2, alpha_1 = 1
    subs = [Subflow(10, 10), Subflow(20, 10)]
    assert balia_increase(subs, 0) == pytest.approx(1 / (10 * 9) * 1.5 * 1.2)
    assert balia_increase(subs, 1) == pytest.approx(2 / (10 * 9))
    assert balia_window_after_loss(subs, 0) == pytest.approx(10 - 5 * 1.5)
    assert balia_window_after_loss(subs, 1) == pytest.approx(10)
    # one path: NewReno both ways
    assert balia_increase([Subflow(10, 10)], 0) == pytest.approx(0.1)
    assert balia_window_after_loss([Subflow(10, 10)], 0) == pytest.approx(5)


def test_wvegas_hand_worked() -> None:
    # w=20, base 10 ms, round RTT 12 ms: diff = 20*2/12 = 3.33 segments queued; the other
    # subflow 10 segments at 20 ms: weight = (20/12)/(20/12 + 0.5) = 0.769, alpha = 7.7
    subs = [Subflow(20, 12, 10), Subflow(10, 20, 15)]
    assert wvegas_round(subs, 0, False) == 21                # diff < alpha: grow
    # the other: diff = 10*5/20 = 2.5 > alpha = 10 * 0.5/(2.17) = 2.31: shrink
    assert wvegas_round(subs, 1, False) == 9
    # slow start ends when more than gamma = 1 segment queues: w <- w*base/rtt + 1
    assert wvegas_round(subs, 0, True) == pytest.approx(20 * 10 / 12 + 1)
    assert wvegas_round([Subflow(20, 10.2, 10)], 0, True) is None   # 0.39 queued


def test_bpf_arithmetic_matches_the_hand_worked_cases() -> None:
    us = [Subflow(s.cwnd, s.rtt * 1000, s.aux, s.aux2) for s in TWO]
    assert decide("lia", "increase", us, 0) / FP == pytest.approx(0.064, rel=1e-3)
    olia = [Subflow(10, 10_000, 100, 0), Subflow(20, 10_000, 50, 0)]
    assert decide("olia", "increase", olia, 0) / FP == pytest.approx(0.1 / 9 + 0.05, rel=1e-3)
    assert decide("olia", "increase", olia, 1) / FP == pytest.approx(0.2 / 9 - 0.025,
                                                                      abs=2e-5)
    bal = [Subflow(10, 10_000), Subflow(20, 10_000)]
    assert decide("balia", "increase", bal, 0) / FP == pytest.approx(0.02, rel=2e-3)
    assert decide("balia", "ssthresh", bal, 0) == 3                 # 10 - 7.5, rounded up
    veg = [Subflow(20, 12_000, 10_000), Subflow(10, 20_000, 15_000)]
    assert decide("wvegas", "round", veg, 0) == 21
    assert decide("wvegas", "round", veg, 1) == 9


windows = st.integers(min_value=1, max_value=2000)
rtts = st.integers(min_value=200, max_value=500_000)        # microseconds


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(windows, rtts), min_size=1, max_size=8), st.data())
def test_integer_increase_within_rounding_of_the_rule(paths, data) -> None:
    subs = [Subflow(w, r) for w, r in paths]
    self = data.draw(st.integers(min_value=0, max_value=len(subs) - 1))
    if max(r for _w, r in paths) / min(r for _w, r in paths) > 256:
        return  # RTT ratios above 256 are capped on purpose (no 64-bit overflow)
    real = lia_increase(subs, self)
    got = decide("lia", "increase", subs, self) / FP
    assert got == pytest.approx(real, rel=0.02, abs=3 / FP)
    got = decide("balia", "increase", subs, self) / FP
    assert got == pytest.approx(balia_increase(subs, self), rel=0.03, abs=3 / FP)


def _dump(recs: list[dict]) -> str:
    rows = [{"key": ["0x00"], "value": ["0x00"], "formatted": {"key": i, "value": r}}
            for i, r in enumerate(recs)]
    return json.dumps(rows)


def _rec(seq: int, kind: int, cwnd: list[int], rtt: list[int], out: int, self: int = 0,
         aux: list[int] | None = None) -> dict:
    pad = [0] * (8 - len(cwnd))
    return {"seq": seq, "kind": kind, "self": self, "acked": 1, "in_ss": 0,
            "cwnd": cwnd + pad, "rtt_us": rtt + pad, "aux": (aux or [0] * len(cwnd)) + pad,
            "aux2": [0] * 8, "out": out}


def test_trace_parse_and_check() -> None:
    two = [Subflow(10, 10_000), Subflow(10, 40_000)]
    good = decide("lia", "increase", two, 0)
    recs = [_rec(2, 1, [10, 10], [10_000, 40_000], good),
            _rec(1, 1, [10, 10], [10_000, 40_000], good + 5),
            {**_rec(0, 1, [0], [0], 0)}]                       # never written: skipped
    parsed = parse_dump(_dump(recs), "lia")
    assert [r["seq"] for r in parsed] == [1, 2] and parsed[0]["kind"] == "increase"
    res = check_trace(parsed)
    assert (res.compared, res.equal) == (2, 1) and res.mismatches[0]["model"] == good
    with pytest.raises(InputError, match="not a bpftool dump"):
        parse_dump("{}", "lia")
    with pytest.raises(InputError, match="without"):
        parse_dump(json.dumps([{"key": 0, "value": {"seq": 1, "kind": 1}}]), "lia")
