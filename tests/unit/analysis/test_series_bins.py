"""The dense binning of `analysis.series` gives what the sort-based one does."""

from __future__ import annotations

import numpy as np
import pytest

from analysis import series


def _by_sorting(r, b, nb, good):
    o = np.lexsort((b, r))
    rs, bs = r[o], b[o]
    first = np.flatnonzero(np.r_[True, (rs[1:] != rs[:-1]) | (bs[1:] != bs[:-1])])
    return rs[first], bs[first], np.add.reduceat(nb[o], first), np.add.reduceat(good[o], first)


@pytest.mark.parametrize("spread", [50, 10**7])  # dense grid, and one too wide for it
def test_bin_sums_as_by_sorting(spread):
    rng = np.random.default_rng(3)
    n = 5000
    r = rng.integers(0, 4, n)
    b = rng.integers(10, 10 + spread, n)
    nb = rng.integers(0, 1500, n).astype(np.uint32)
    good = rng.integers(0, 1500, n).astype(np.int64)
    got = series._bin_sums(r, b, 4, nb, good)
    want = _by_sorting(r, b, nb, good)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and np.array_equal(g, w)
