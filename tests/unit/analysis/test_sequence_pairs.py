"""`duplicated_pairs_at` and `pair_keys` agree with the full `duplicated_pairs`; how
`reorder_analysis` classifies segments, by hand and against a byte-by-byte reading."""

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


def _classify(group, start, end, tsval=None):
    from analysis.sequence import reorder_analysis

    ra = reorder_analysis(np.array(group), np.array(start, np.int64),
                          np.array(end, np.int64), None if tsval is None else np.array(tsval))
    return ["R" if r else "o" if o else "." for r, o in
            zip(ra["retrans"].tolist(), ra["reordered"].tolist(), strict=True)]


def test_a_retransmission_cut_at_other_boundaries_is_no_reordering():
    # 0-1000, 1000-2000, 2000-3000 arrive; then 500-1500 (every byte seen: a retransmission
    # cut otherwise) and 2500-3500 (starts behind and brings new bytes: reordered)
    g = [0] * 5
    assert _classify(g, [0, 1000, 2000, 500, 2500], [1000, 2000, 3000, 1500, 3500]) == \
        [".", ".", ".", "R", "o"]
    # a hole filled late is reordered; the same bytes once more, cut otherwise, are not
    assert _classify(g, [0, 2000, 1000, 1200, 3000], [1000, 3000, 2000, 1800, 4000]) == \
        [".", ".", "o", "R", "."]
    # the same start seen before, and a later TSval, stay retransmissions; groups apart
    assert _classify([0, 0, 0, 1, 1], [0, 1000, 0, 0, 1000], [1000, 2000, 1000, 1000, 2000]) \
        == [".", ".", "R", ".", "."]
    assert _classify(g[:3], [0, 2000, 1000], [1000, 3000, 2000], tsval=[1, 2, 3]) == \
        [".", ".", "R"]


def _naive_classes(group, start, end):
    """RFC 4737 read byte by byte: behind the highest byte so far, a segment is a
    retransmission when its start or every byte of it arrived before, else reordered."""
    out, starts, seen, hi = [], {}, {}, {}
    for g, s, e in zip(group, start, end, strict=True):
        had = seen.setdefault(g, set())
        behind = g in hi and s < hi[g]
        again = s in starts.setdefault(g, set()) or set(range(s, e)) <= had
        out.append("." if not behind else "R" if again else "o")
        starts[g].add(s)
        had |= set(range(s, e))
        hi[g] = max(hi.get(g, e), e)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_classes_as_a_naive_byte_by_byte_reading(seed):
    rng = np.random.default_rng(seed)
    group, start, end = [], [], []
    for g in range(20):
        for _ in range(int(rng.integers(1, 30))):
            s = int(rng.integers(0, 60))
            group.append(g)
            start.append(s)
            end.append(s + int(rng.integers(1, 12)))
    assert _classify(group, start, end) == _naive_classes(group, start, end)
