"""Throughput and goodput per key (path, subflow, flow) per time bin.

`throughput_series` bins packets on the run's clock: bin k covers
``[t0 + k * bin_s, t0 + (k + 1) * bin_s)``, k >= 0, and packets before ``t0`` (the readiness
check's warm-up, before the network was ready) are in no bin.  Every bin between a key's
first and last is present (0 when empty), so one series is bounded by `MAX_SERIES_BINS`
bins whatever the capture's timestamps say (`SeriesLimitError` beyond).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from testbed.core.errors import InputError

SERIES_COLUMNS = ["key", "t", "t_rel", "bin_s", "bytes", "rate_bps", "goodput_bps"]
MAX_SERIES_BINS = 1_000_000  # bins of one series (key): 1000 s of 1 ms bins, 27 h of 0.1 s


class SeriesLimitError(InputError):
    """A time series would need more than `MAX_SERIES_BINS` bins."""


def throughput_series(ts_ns: np.ndarray, nbytes: np.ndarray, keys: np.ndarray, bin_s: float,
                      t0: float, good: np.ndarray | None = None, source: str = "",
                      key_names: np.ndarray | None = None) -> pd.DataFrame:
    """Throughput and goodput per key per time bin.

    ts_ns: packet times; nbytes: payload bytes per packet; keys: series key per packet, or,
    with key_names, an integer index into key_names per packet (faster: no per-packet
    strings); bin_s: bin width (s); t0: time origin (s, epoch); good: bytes per packet that
    count as goodput (default: all; `CaptureAnalysis.goodput_bytes` gives the bytes seen
    for the first time); source: the capture, for messages.  Columns: key, t (bin start,
    epoch s), t_rel (s since t0), bin_s, bytes, rate_bps, goodput_bps; rows sorted by key,
    then time.  Packets before t0 are left out (a key with none at or after t0 has no
    series), so t_rel >= 0.  Bins between a key's first and last are present with 0, so
    one series holds at most `MAX_SERIES_BINS` bins: a longer one raises
    `SeriesLimitError` (memory stays bounded whatever the capture's timestamps say).
    """
    if not (np.isfinite(bin_s) and bin_s > 0):
        raise SeriesLimitError(f"time-series bin width {bin_s!r} s: expected a positive "
                               "number of seconds")
    if not len(ts_ns):
        return pd.DataFrame({k: [] for k in SERIES_COLUMNS})
    if key_names is None:
        codes, names = pd.factorize(keys)
    else:  # equal names are one series
        merged, names = pd.factorize(np.asarray(key_names, object))
        # one name: every packet's code is 0, no per-packet array needed
        codes = None if len(names) == 1 else merged[np.asarray(keys, np.int64)]
    names = np.asarray(names, object)
    by_name = np.argsort(names, kind="stable")
    rank = np.empty(len(names), np.int64)
    rank[by_name] = np.arange(len(names))
    lim = float(1 << 62)
    x = ts_ns / 1e9  # in place from here: one temporary, not one per step
    x -= t0
    x /= bin_s
    np.floor(x, out=x)
    np.clip(x, -lim, lim, out=x)
    b = x.astype(np.int64)
    del x
    on_clock = b >= 0
    if not on_clock.all():
        if not on_clock.any():
            return pd.DataFrame({k: [] for k in SERIES_COLUMNS})
        b = b[on_clock]
        codes = None if codes is None else codes[on_clock]
        nbytes = np.asarray(nbytes)[on_clock]
        good = None if good is None else np.asarray(good)[on_clock]
    r = None if codes is None else rank[codes]
    gk, gb, gbytes, ggood = _bin_sums(r, b, len(names), np.asarray(nbytes),
                                      None if good is None else np.asarray(good))
    kfirst = np.flatnonzero(np.r_[True, gk[1:] != gk[:-1]])
    kmin = gb[kfirst]
    kmax = gb[np.r_[kfirst[1:], len(gb)] - 1]
    span = kmax - kmin + 1
    if span.max() > MAX_SERIES_BINS:
        k = int(np.argmax(span))
        key, n = names[by_name[gk[kfirst[k]]]], int(span[k])
        where = f"{source}: " if source else ""
        raise SeriesLimitError(
            f"{where}series {key!s} spans {n * bin_s:.6g} s, {n} bins of "
            f"{bin_s:g} s (limit {MAX_SERIES_BINS} bins); choose a coarser bin width or "
            "check the capture's timestamps")
    off = np.r_[0, np.cumsum(span)[:-1]]
    total = int(span.sum())
    kidx = np.repeat(np.arange(len(kfirst)), span)
    bins = kmin[kidx] + (np.arange(total) - off[kidx])
    gkey = np.cumsum(np.r_[True, gk[1:] != gk[:-1]]) - 1  # key index of each group
    at = off[gkey] + (gb - kmin[gkey])
    full_bytes = np.zeros(total, gbytes.dtype)
    full_bytes[at] = gbytes
    full_good = np.zeros(total, ggood.dtype)
    full_good[at] = ggood
    out = pd.DataFrame({"key": names[by_name[gk[kfirst]]][kidx], "bin": bins,
                        "bytes": full_bytes, "good": full_good})
    out["t_rel"] = out["bin"] * bin_s
    out["t"] = t0 + out["t_rel"]
    out["bin_s"] = float(bin_s)
    out["rate_bps"] = out["bytes"] * 8 / bin_s
    out["goodput_bps"] = out["good"] * 8 / bin_s
    return out[SERIES_COLUMNS]


def _bin_sums(r: np.ndarray | None, b: np.ndarray, nkeys: int, nb: np.ndarray,
              good: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The occupied (key rank, bin) pairs sorted by rank then bin, with the sums of nb and
    good over each: (rank, bin, bytes, good).  Sums keep nb's (good's) dtype.  r None:
    every packet has rank 0.

    Dense (`np.bincount` over every rank and bin in range, linear in the packets) when that
    grid is small next to the packets; else by one sort of the pairs.
    """
    b0 = int(b.min())
    width = int(b.max()) - b0 + 1
    if nkeys * width <= max(4 * len(b), 1 << 16):
        cell = b - b0
        if r is not None:
            cell += r * width
        size = nkeys * width
        hit = np.flatnonzero(np.bincount(cell, minlength=size))
        gbytes = _exact_sums(cell, nb, size)[hit]
        ggood = gbytes if good is None else _exact_sums(cell, good, size)[hit]
        return hit // width, hit % width + b0, gbytes, ggood
    if r is None:
        r = np.zeros(len(b), np.int64)
    o = np.lexsort((b, r))
    rs, bs = r[o], b[o]
    first = np.flatnonzero(np.r_[True, (rs[1:] != rs[:-1]) | (bs[1:] != bs[:-1])])
    gbytes = np.add.reduceat(nb[o], first)
    ggood = gbytes if good is None else np.add.reduceat(good[o], first)
    return rs[first], bs[first], gbytes, ggood


def _exact_sums(cell: np.ndarray, v: np.ndarray, size: int) -> np.ndarray:
    """Per cell, the sum of v, in the dtype `np.add.reduceat` gives v (integer sums are exact:
    `np.bincount` adds in float64, exact below 2^53, far above any bin's bytes)."""
    out = np.bincount(cell, v, size)
    dt = np.add.reduce(v[:0]).dtype if v.dtype.kind in "iub" else v.dtype
    return out.astype(dt)
