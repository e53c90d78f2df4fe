"""Sequence numbers over grouped arrays, without a per-packet Python loop.

The arrays hold the packets of many groups (a flow direction, an MPTCP connection), each
group contiguous and in arrival order.  `unwrap32` turns 32-bit sequence numbers into
64-bit offsets; `running_max_before` is RFC 4737's NextExp; `stable_order`, `pair_groups`
and `duplicated_pairs` group equal (a, b) pairs with one sort.  `reorder_analysis` uses them
to classify each segment as new, retransmitted or reordered, and `first_seen_bytes` counts
the bytes of each segment that no earlier segment of its group carried (goodput):

* A segment is *behind* when it starts below the highest byte seen so far in its group
  (RFC 4737's NextExp).  A behind segment is a *retransmission* when its start was seen
  before or, with TCP timestamps, when its TSval is newer than every earlier segment's (it
  was sent later, so the network did not reorder it); otherwise it is *reordered*.
* The reordering extent of a reordered packet is its arrival index minus that of the first
  packet with a higher sequence number (RFC 4737 sections 4.1 and 4.2.1).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

WRAP32 = 1 << 32  # the 32-bit sequence space


def group_starts(group: np.ndarray) -> np.ndarray:
    """True where a new group begins (group ids are contiguous runs)."""
    return np.r_[True, group[1:] != group[:-1]] if len(group) else np.zeros(0, bool)


def _group_cumsum(v: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Cumulative sums restarting at each group; v (int64) is overwritten with them."""
    cs = np.cumsum(v, out=v)
    idx = np.flatnonzero(starts)
    if len(idx) <= 1:
        return cs
    before = cs[idx[1:] - 1].copy()
    if len(idx) <= 1024:  # few groups: subtract in place, one slice each
        ends = np.r_[idx[2:], len(cs)]
        for lo, hi, b in zip(idx[1:].tolist(), ends.tolist(), before.tolist(), strict=True):
            cs[lo:hi] -= b
        return cs
    cs -= np.repeat(np.r_[0, before], np.diff(np.r_[idx, len(v)]))
    return cs


def unwrap32(values: np.ndarray, base: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Unwrap 32-bit sequence numbers within contiguous groups.

    values: raw uint32 values in arrival order; base: per-element origin (same group, same
    base); group: group id per element.  Returns int64 offsets from base.
    """
    rel = values.astype(np.int64)
    rel -= base.astype(np.int64, copy=False)
    rel %= WRAP32
    st = group_starts(group)
    d = np.empty(len(rel), np.int64)
    if len(rel):
        d[0] = rel[0]
        step = d[1:]
        np.subtract(rel[1:], rel[:-1], out=step)
        step += 1 << 31
        step %= WRAP32
        step -= 1 << 31
        first = rel[st]
        d[st] = np.where(first >= (1 << 31), first - WRAP32, first)
    del rel
    return _group_cumsum(d, st)


def running_max_before(v: np.ndarray, starts: np.ndarray, floor: int) -> np.ndarray:
    """Running maximum of the previous elements of each group (floor for the first)."""
    if not len(v):
        return v.copy()
    m = np.empty(len(v), np.int64)
    m[0] = floor
    m[1:] = v[:-1]
    m[starts] = floor
    span = max(abs(int(v.min())), abs(int(v.max()))) + abs(floor) + 1
    lift = np.cumsum(starts, dtype=np.int64)
    lift -= 1
    lift *= 2 * span + 1
    m += lift
    np.maximum.accumulate(m, out=m)
    m -= lift
    return m


def stable_order(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The stable sort order of integer pairs (a, b) (equal pairs keep their order).

    One stable argsort of a combined key when the ranges allow (fast on the nearly sorted
    keys of a capture: flows grouped, sequence numbers and times rising), else a lexsort
    with the index as last key.
    """
    if not len(a):
        return np.zeros(0, np.int64)
    a0, b0 = int(a.min()), int(b.min())
    ra, rb = int(a.max()) - a0 + 1, int(b.max()) - b0 + 1
    if ra * rb < (1 << 62):
        key = (a.astype(np.int64) - a0) * rb + (b.astype(np.int64) - b0)
        return np.argsort(key, kind="stable")
    return np.lexsort((np.arange(len(a)), b, a))


def pair_groups(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group equal integer (a, b) pairs with one sort instead of hashing.

    Returns (order, starts, gid): order sorts the pairs, starts are the positions in that
    order where a group begins, gid the group of each element (groups numbered in sorted
    pair order).
    """
    o = stable_order(a, b)
    if not len(o):
        z = np.zeros(0, np.int64)
        return z, z, z
    sa, sb = a[o], b[o]
    new = np.r_[True, (sa[1:] != sa[:-1]) | (sb[1:] != sb[:-1])]
    gid = np.empty(len(o), np.int64)
    gid[o] = np.cumsum(new) - 1
    return o, np.flatnonzero(new), gid


def duplicated_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """True where (a[i], b[i]) occurred at an earlier index (as DataFrame.duplicated)."""
    o, starts, gid = pair_groups(a, b)
    if not len(o):
        return np.zeros(0, bool)
    first = np.minimum.reduceat(o, starts)
    return np.arange(len(o)) != first[gid]


def pair_keys(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """One int64 per integer pair (a, b), equal exactly where the pairs are equal; None
    when the ranges of a and b do not fit one 62-bit key."""
    if not len(a):
        return np.zeros(0, np.int64)
    a0, b0 = int(a.min()), int(b.min())
    ra, rb = int(a.max()) - a0 + 1, int(b.max()) - b0 + 1
    if ra * rb >= (1 << 62):
        return None
    return (a.astype(np.int64) - a0) * rb + (b.astype(np.int64) - b0)


def duplicated_pairs_at(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """`duplicated_pairs` (a, b) where mask holds, False elsewhere.

    Only the pairs equal to a masked one are grouped (found by one hash look-up), so a
    mask that holds rarely costs a linear pass, not a sort of every pair."""
    out = np.zeros(len(a), bool)
    idx = np.flatnonzero(mask)
    if not len(idx):
        return out
    key = pair_keys(a, b)
    if key is None:
        return duplicated_pairs(a, b) & mask
    rel = np.flatnonzero(pd.Series(key, copy=False).isin(key[idx]).to_numpy())
    out[rel] = duplicated_pairs(a[rel], b[rel])
    return out & mask


def reorder_analysis(group: np.ndarray, start: np.ndarray, end: np.ndarray,
                     tsval: np.ndarray | None = None,
                     new_bytes: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Classify segments (contiguous groups, arrival order) as new, retransmitted, reordered.

    group: group id; start/end: sequence range of each segment (int64); tsval: sender
    timestamps (0 = none) used to tell a late retransmission from network reordering;
    new_bytes: `first_seen_bytes` of the same segments when the caller has it (computed
    here otherwise).
    Returns boolean arrays ``retrans``, ``reordered`` and int array ``extent`` (0 if none).
    """
    n = len(group)
    st = group_starts(group)
    nextexp = running_max_before(end, st, -(1 << 40))
    behind = start < nextexp
    # a start seen before is behind (the earlier segment ends above it): look only there
    dup = duplicated_pairs_at(np.asarray(group), np.asarray(start), behind)
    late = np.zeros(n, bool)
    if tsval is not None:
        ts = tsval.astype(np.int64)
        has = ts > 0
        prev_ts = running_max_before(np.where(has, ts, -1), st, -1)
        late = has & (prev_ts >= 0) & (ts > prev_ts)
    # a segment that brings no byte an earlier one had not carried (a retransmission cut
    # at other boundaries than the first transmission, as MPTCP's data level and TCP's
    # re-segmented retransmissions are) is a retransmission, not a late original
    maybe = np.flatnonzero(behind & ~(dup | late))
    covered = np.zeros(n, bool)
    if len(maybe):
        if new_bytes is None:
            new_bytes = first_seen_bytes(group, start, end)
        covered[maybe] = new_bytes[maybe] == 0
    retrans = behind & (dup | late | covered)
    reordered = behind & ~retrans
    extent = np.zeros(n, np.int64)
    r = np.flatnonzero(reordered)
    if len(r):
        uniq = ~retrans
        pos = np.cumsum(uniq) - 1                      # arrival index among unique segments
        gi = np.cumsum(st) - 1
        u = np.flatnonzero(uniq)
        span = int(np.abs(start).max()) + 1
        lifted = np.maximum.accumulate(start[u] + gi[u] * (2 * span + 1))
        first_higher = np.searchsorted(lifted, start[r] + gi[r] * (2 * span + 1), "right")
        extent[r] = pos[r] - first_higher
    return {"retrans": retrans, "reordered": reordered, "extent": extent}


def first_seen_bytes(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per segment, how many of its bytes no earlier segment of its group carried.

    group: group id (contiguous groups, arrival order); start/end: unwrapped sequence range
    of each segment (int64).  A group's counts add up to the bytes of the union of its
    segments: its span ``max(end) - min(start)`` when every byte was seen at least once.
    Where every segment starts inside the range seen before it (a sender's capture that
    missed nothing), a segment's count is its bytes beyond the highest end before it; a
    group with a hole (a capture that missed a first transmission, reordering, or an MPTCP
    connection's subflows sending data in another order than its data sequence) is
    counted exactly over the elementary intervals between its segments' boundaries.
    """
    start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
    if not len(start):
        return np.zeros(0, np.int64)
    st = group_starts(group)
    lo = int(start.min())
    highest = running_max_before(end, st, lo)
    lowest = running_max_before(np.negative(start), st, -int(start.max()))
    np.negative(lowest, out=lowest)
    hole = start < lowest
    del lowest
    hole |= start > highest
    hole &= ~st
    new = np.maximum(start, highest, out=highest)  # in place: highest is not needed again
    np.subtract(end, new, out=new)
    np.maximum(new, 0, out=new)
    new[st] = end[st] - start[st]
    if hole.any():
        gi = np.cumsum(st) - 1
        holey = np.flatnonzero(np.isin(gi, np.unique(gi[hole])))
        new[holey] = _union_firsts(gi[holey], start[holey], end[holey])
    return new


def _union_firsts(gi: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """`first_seen_bytes` by elementary intervals: each piece between two consecutive
    boundaries of a group belongs to the earliest segment that covers it."""
    n = len(start)
    o = stable_order(np.r_[gi, gi], np.r_[start, end])
    pos = np.r_[start, end][o]
    grp = np.r_[gi, gi][o]
    new_b = np.r_[True, (grp[1:] != grp[:-1]) | (pos[1:] != pos[:-1])]
    bound = pos[new_b]                                # boundaries, sorted by (group, pos)
    rank = np.empty(2 * n, np.int64)
    rank[o] = np.cumsum(new_b) - 1
    first, last = rank[:n], rank[n:]                  # a segment covers pieces first..last-1
    count = np.maximum(last - first, 0)
    seg = np.repeat(np.arange(n), count)
    off = np.cumsum(count) - count
    piece = first[seg] + (np.arange(len(seg)) - off[seg])
    owner = np.full(len(bound), n, np.int64)
    np.minimum.at(owner, piece, seg)                  # the earliest segment covering it
    has = np.flatnonzero(owner < n)
    return np.bincount(owner[has], bound[has + 1] - bound[has], n).astype(np.int64)
