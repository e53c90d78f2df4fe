"""`duplicated_pairs_at` and `pair_keys` agree with the full `duplicated_pairs`."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.sequence import duplicated_pairs, duplicated_pairs_at, pair_keys


@pytest.mark.parametrize("span", [20, 1 << 40])  # one 62-bit key, and ranges too wide
def test_duplicated_pairs_at_is_the_masked_full_answer(span):
    rng = np.random.default_rng(7)
    n = 3000
    a = rng.integers(0, 5, n)
    b = rng.integers(0, 40, n) * (span // 20)
    if span > 1 << 30:
        a = a * (1 << 30)
    for p in (0.0, 0.01, 0.5, 1.0):
        mask = rng.random(n) < p
        assert np.array_equal(duplicated_pairs_at(a, b, mask), duplicated_pairs(a, b) & mask)


def test_pair_keys_equal_exactly_for_equal_pairs():
    a = np.array([1, 1, 2, 2, 1])
    b = np.array([5, 6, 5, 5, 5])
    k = pair_keys(a, b)
    assert k is not None and (k[0] == k[4]) and (k[2] == k[3]) and len(set(k)) == 3
    assert pair_keys(np.array([0, 1 << 40]), np.array([0, 1 << 40])) is None
