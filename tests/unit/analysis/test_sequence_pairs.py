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


def _naive_unwrap(values, base, group):
    out, last = [], {}
    for v, b, g in zip(values.tolist(), base.tolist(), group.tolist(), strict=True):
        rel = (v - b) % (1 << 32)
        if g not in last:
            x = rel - (1 << 32) if rel >= (1 << 31) else rel
        else:
            step = ((rel - last[g][0] + (1 << 31)) % (1 << 32)) - (1 << 31)
            x = last[g][1] + step
        last[g] = (rel, x)
        out.append(x)
    return np.array(out, np.int64)


@pytest.mark.parametrize("groups", [1, 7, 3000])  # one group, a few, more than 1024
def test_unwrap32_and_running_max_as_naive(groups):
    from analysis.sequence import group_starts, running_max_before, unwrap32

    rng = np.random.default_rng(groups)
    n = 20000
    group = np.sort(rng.integers(0, groups, n))
    values = (rng.integers(0, 1 << 32, n)).astype(np.uint32)
    values[1::2] = values[::2][: len(values[1::2])] + np.uint32(1000)  # small steps, wraps
    base = rng.integers(0, 1 << 32, groups)[group].astype(np.uint32)
    assert np.array_equal(unwrap32(values, base, group), _naive_unwrap(values, base, group))
    v = rng.integers(-1000, 1000, n)
    st = group_starts(group)
    got = running_max_before(v, st, -5000)
    want, cur = np.empty(n, np.int64), -5000
    for i in range(n):
        cur = -5000 if st[i] else cur
        want[i] = cur
        cur = max(cur, int(v[i]))
    assert np.array_equal(got, want)
