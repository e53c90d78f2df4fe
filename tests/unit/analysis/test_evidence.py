"""Claims' evidence: t quantiles, Welch / Student / Wilson intervals and verdicts, by hand."""

from __future__ import annotations

import math

import pytest

from analysis.claims import Claim
from analysis.evidence import (
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    NO_DATA,
    combine,
    difference,
    level,
    proportion,
    t_quantile,
)


@pytest.mark.parametrize(("df", "q"), [(1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764),
                                       (10, 2.2281), (30, 2.0423), (1e6, 1.9600)])
def test_t_quantiles_match_the_tables(df, q):
    assert t_quantile(0.975, df) == pytest.approx(q, abs=1e-4)
    assert t_quantile(0.025, df) == pytest.approx(-q, abs=1e-4)


def test_welch_interval_by_hand():
    # means 10 and 13, variances 1 and 4, n 3 each: se^2 = 1/3 + 4/3 = 5/3
    # df = (5/3)^2 / ((1/3)^2/2 + (4/3)^2/2) = (25/9) / (17/18) = 2.941
    e = difference("b - a", [9, 10, 11], [11, 13, 15])
    df = (5 / 3) ** 2 / ((1 / 3) ** 2 / 2 + (4 / 3) ** 2 / 2)
    h = t_quantile(0.975, df) * math.sqrt(5 / 3)
    assert e.value == pytest.approx(3.0) and e.n == (3, 3)
    assert (e.low, e.high) == (pytest.approx(3 - h), pytest.approx(3 + h))
    assert e.method == f"Welch t, df {df:.1f}"
    assert e.low < 0 < e.high and e.verdict == INCONCLUSIVE  # the interval contains 0


def test_a_clear_difference_over_three_repetitions_holds():
    e = difference("two - one", [240, 245, 250], [320, 330, 340])
    assert e.verdict == HOLDS and e.low > 0
    assert difference("b - a", [320, 330, 340], [240, 245, 250]).verdict == FAILS


@pytest.mark.parametrize(("low", "high", "verdict"), [
    (100.0, 109.0, INCONCLUSIVE),  # 9 % on one repetition
    (100.0, 115.0, HOLDS),         # 15 %
    (100.0, 85.0, FAILS),          # 15 % the other way
    (278.0, 285.0, INCONCLUSIVE),  # P0 Fig. 4 in one CI run: +2.5 %
])
def test_one_repetition_needs_ten_percent(low, high, verdict):
    e = difference("b - a", [low], [high])
    assert e.verdict == verdict and e.low is None and e.n == (1, 1)
    assert e.relative == pytest.approx((high - low) / low)


def test_one_side_with_one_repetition_has_no_interval():
    e = difference("b - a", [100.0], [120.0, 130.0, 125.0])
    assert e.low is None and e.verdict == HOLDS and e.n == (1, 3)


def test_a_difference_from_zero_on_one_repetition_holds():
    e = difference("spray - 10 x single", [0.0], [12.7])
    assert e.verdict == HOLDS and e.relative == math.inf
    assert e.record()["relative"] is None  # JSON has no infinity


def test_level_student_t_by_hand():
    # mean 70, sd 2, n 4: half width 3.1824 * 2 / 2 = 3.18 -> [66.8, 73.2], below 80
    e = level("utilisation", [68, 70, 72, 70 + 0.0], 80.0, above=False)
    sd = math.sqrt(sum((x - 70) ** 2 for x in (68, 70, 72, 70)) / 3)
    h = t_quantile(0.975, 3) * sd / 2
    assert (e.low, e.high) == (pytest.approx(70 - h), pytest.approx(70 + h))
    assert e.verdict == HOLDS and e.method == "Student t, df 3"
    assert level("utilisation", [76, 84, 80], 80.0, above=False).verdict == INCONCLUSIVE
    assert level("utilisation", [85, 86, 87], 80.0, above=False).verdict == FAILS


def test_level_on_one_repetition():
    assert level("u", [76.7], 80.0, above=False).verdict == INCONCLUSIVE  # 4 % from it
    assert level("u", [70.0], 80.0, above=False).verdict == HOLDS         # 12.5 %
    assert level("u", [0.0], 0.1, above=False).verdict == HOLDS


def test_wilson_interval_by_hand():
    # 13 of 100: centre (0.13 + 1.96^2/200) / (1 + 1.96^2/100) = 0.1437, half 0.0661
    e = proportion("lost", 13, 100, 1, 5.0, above=True)
    assert (e.low, e.high) == (pytest.approx(7.757, abs=1e-3), pytest.approx(20.98, abs=1e-2))
    assert e.verdict == HOLDS and e.n == (1,)
    assert proportion("lost", 6, 100, 1, 5.0, above=True).verdict == INCONCLUSIVE
    assert proportion("lost", 0, 300, 3, 5.0, above=True).verdict == FAILS


def test_no_data_and_combining_parts():
    assert difference("b - a", [], [1.0]).verdict == NO_DATA
    assert level("u", [float("nan")], 1.0, above=True).verdict == NO_DATA
    assert combine([]) == NO_DATA
    assert combine([HOLDS, INCONCLUSIVE]) == INCONCLUSIVE
    assert combine([HOLDS, FAILS, NO_DATA]) == FAILS
    assert combine([HOLDS, HOLDS]) == HOLDS
    claim = Claim("Fig. 4", "two > one", [difference("two - one", [100.0], [109.0])])
    rec = claim.record()
    assert rec["verdict"] == INCONCLUSIVE and rec["evidence"][0]["n"] == [1, 1]
    assert rec["evidence"][0]["ci95"] is None
