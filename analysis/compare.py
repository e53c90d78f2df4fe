"""`testbed compare`: sets of runs side by side, with differences and 95 % intervals.

A *side* is a set of complete runs: every run of a result folder (the --out DIR of
`testbed run`, or one spec's folder of a study), one run's bundle, or -- with ``by`` --
the runs of all the given folders whose swept key has one value (``controller.kind=spray``).
`load_runs` reads the runs view of each path (`testbed.results.summary.run_row`; runs
that are not complete are left out, each with a warning), `form_sides` forms the sides,
`load_side` stacks their metrics tables and `compare_pair` gives one `Row` per metric for
side B against side A, the first side and the reference: both values, B - A and the 95 %
interval of B - A (`analysis.evidence.difference`: Welch's t).

* Run rows: one value per run (the runs view's headline metrics); n counts runs; the
  value shown is the mean over the side's runs.  With one run on a side there is no
  interval, and the row says so.
* Flow rows: one value per top-level flow (TCP/UDP flow or MPTCP connection, never a
  subflow), pooled over the side's runs; n counts flows.  Flows of one run share its
  network, so this interval is narrower than one over repetitions would be.
* Quantile rows (median, 95th percentile of flows' FCT, median RTT sample): no interval.

A side's value is marked (``flagged``) when a run it comes from has a fidelity verdict
other than ``ok`` (docs/fidelity.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.bundle import HEADLINE_KEYS
from analysis.evidence import FAILS, HOLDS, Estimate, difference
from analysis.plots import value_label
from testbed.core import safefiles
from testbed.core.errors import InputError
from testbed.results.bundle import COMPLETE, Bundle, check_format
from testbed.results.folders import bundles_at, not_bundles
from testbed.results.query import check_readable, metrics_table
from testbed.results.summary import PROTECTED_COLUMNS, run_row
from testbed.spec.sweep import value_name

TOP_KINDS = ("flow", "connection")  # the rows of flows / timeseries that are whole transfers


@dataclass(frozen=True)
class Metric:
    """One row of a comparison. column: the runs-view or flows column; label: what it is
    (with its unit in `header`); unit, scale: shown as value * scale in unit; level:
    ``run`` (runs view), ``flow`` (metrics/flows) or ``rtt`` (metrics/rtt); stat: ``mean``
    (with an interval), ``median`` or ``p95`` (without)."""

    column: str
    label: str
    unit: str
    scale: float
    level: str
    stat: str = "mean"

    @property
    def header(self) -> str:
        return f"{self.label} ({self.unit})"


METRICS = (
    Metric("throughput_bps_mean", "run: throughput, mean of flows", "Mbit/s", 1e-6, "run"),
    Metric("long_throughput_bps_mean", "run: throughput, flows >= 1 MB", "Mbit/s", 1e-6,
           "run"),
    Metric("fct_s_median", "run: FCT, median of flows", "ms", 1e3, "run"),
    Metric("short_fct_s_mean", "run: FCT, flows < 100 KB", "ms", 1e3, "run"),
    Metric("ooo_percent", "run: reordered data packets, RFC 4737", "%", 1.0, "run"),
    Metric("retransmissions", "run: retransmissions", "packets", 1.0, "run"),
    Metric("throughput_bps", "flow: throughput, mean", "Mbit/s", 1e-6, "flow"),
    Metric("fct_s", "flow: FCT, mean", "ms", 1e3, "flow"),
    Metric("fct_s", "flow: FCT, median", "ms", 1e3, "flow", "median"),
    Metric("fct_s", "flow: FCT, 95th percentile", "ms", 1e3, "flow", "p95"),
    Metric("ooo_ratio", "flow: out-of-order share, mean", "%", 100.0, "flow"),
    Metric("rtt_ms", "RTT sample: median", "ms", 1.0, "rtt", "median"),
)
_UNIT_OF_N = {"run": "runs", "flow": "flows", "rtt": "samples"}


@dataclass
class Side:
    """One side: label; runs: its rows of the runs view (``path`` names each bundle and
    keys its rows in tables); tables: metrics ``flows``, ``timeseries``, ``rtt`` of its
    runs, stacked, with ``run_id`` holding the bundle's path."""

    label: str
    runs: pd.DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    def not_ok(self) -> set[str]:
        """The bundle paths of runs whose fidelity verdict is not ``ok``."""
        verdict = self.runs.get("fidelity", pd.Series("unknown", index=self.runs.index))
        return {p for p, v in zip(self.runs["path"], verdict, strict=True) if v != "ok"}

    def verdicts(self) -> str:
        """The fidelity verdicts of its runs, counted: ``2 ok, 1 warn``."""
        verdict = self.runs.get("fidelity", pd.Series("unknown", index=self.runs.index))
        counts = verdict.fillna("unknown").astype(str).value_counts()
        return ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda x: x[0]))


@dataclass(frozen=True)
class Row:
    """A metric for side B against side A: a, b: their values (NaN: no data), scaled;
    estimate: B - A with its 95 % interval (None for a quantile); n: values per side;
    flagged: whether each side's values come from a run whose fidelity is not ok."""

    metric: Metric
    a: float
    b: float
    estimate: Estimate | None
    n: tuple[int, int]
    flagged: tuple[bool, bool]

    @property
    def delta(self) -> float:
        return self.estimate.value if self.estimate is not None else self.b - self.a

    @property
    def reading(self) -> str:
        """What the row says, in words."""
        if not all(self.n):
            return "no data on a side"
        if self.estimate is None:
            return "no interval (a quantile)"
        if self.estimate.low is None:
            return f"no interval: 1 {_UNIT_OF_N[self.metric.level][:-1]} on a side"
        if self.estimate.verdict == HOLDS:
            return "B higher"
        if self.estimate.verdict == FAILS:
            return "B lower"
        return "inconclusive (holds 0)"

    def cells(self) -> list[str]:
        """metric, A, B, B - A, 95 % interval, n, reading -- as text."""
        e = self.estimate
        interval = "-" if e is None or e.low is None else f"[{_num(e.low)}, {_num(e.high)}]"
        mark = ("  !" if self.flagged[0] else "", "  !" if self.flagged[1] else "")
        return [self.metric.header, _num(self.a) + mark[0], _num(self.b) + mark[1],
                _num(self.delta, signed=True), interval,
                f"{self.n[0]} / {self.n[1]} {_UNIT_OF_N[self.metric.level]}", self.reading]


COLUMNS = ("metric (unit)", "A", "B", "B - A", "95 % interval of B - A", "n (A / B)",
           "reading")


def _num(v: float | None, signed: bool = False) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    return f"{v:+.4g}" if signed else f"{v:.4g}"


# ---- reading the runs --------------------------------------------------------------------

def _bundles_of(path: Path) -> list[Bundle]:
    """The bundles a path names: itself (a run's bundle) or those directly under it."""
    if not path.exists():
        raise InputError(f"{path}: no such file or folder; give a result folder (the --out "
                         "DIR of `testbed run`) or one run's bundle")
    if not path.is_dir():
        raise InputError(f"{path}: not a folder; give a result folder (the --out DIR of "
                         "`testbed run`) or one run's bundle")
    check_readable(path)  # no bundles, or bundles this user may not read: one line
    return bundles_at(path)



def load_runs(paths: Sequence[Path], warnings: list[str]) -> pd.DataFrame:
    """The complete runs of every path (rows of the runs view), ``source`` = the path's
    index.  A run that is not complete is left out with a line in warnings; a bundle of a
    newer format, or a run not analysed yet, is an `InputError`."""
    rows: list[dict[str, Any]] = []
    for i, path in enumerate(map(Path, paths)):
        found = _bundles_of(path)
        warnings += not_bundles(path)  # none for a run's own bundle
        left_out: dict[str, int] = {}
        first_why: str | None = None  # why the first run left out is, for the message
        for b in found:
            meta, why = b.load_metadata()
            if meta is not None:
                check_format(meta, b.metadata_path)
            # the statuses of docs/bundle.md: invalid JSON is broken, not unreadable
            status = b.status() if meta is not None else f"{b.status()} ({why})"
            if status != COMPLETE:
                left_out[status] = left_out.get(status, 0) + 1
                if first_why is None:
                    _s, reason = b.status_and_why()
                    first_why = f"{b.root.name}: {reason}" if reason else None
                continue
            if safefiles.file_in(b.root, "metrics/flows.parquet") is None:
                raise InputError(f"{b.root}: not analysed yet (no metrics/flows.parquet); "
                                 f"`testbed report {b.root.parent}` analyses it")
            rows.append({**run_row(b), "source": i})
        if left_out:
            warnings.append(f"{path}: left out " + ", ".join(
                f"{n} {s} run(s)" for s, n in sorted(left_out.items())))
        if not any(r["source"] == i for r in rows):
            raise InputError(f"{path}: no complete run to compare ("
                             + ", ".join(f"{n} {s}" for s, n in left_out.items()) + ")"
                             + (f"; {first_why}" if first_why else ""))
    return pd.DataFrame(rows)


def value_text(v: Any) -> str:
    """A parameter value as the text --by / --where match: 1.0 as ``1``; a table (or list
    of tables) with ``name`` fields by those names (``tcp-wifi``), another as JSON."""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (dict, list)):
        return value_name(v)
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def swept_keys(runs: pd.DataFrame) -> list[str]:
    """The parameter columns of runs: neither identity, fidelity, phase times nor headline."""
    skip = {*PROTECTED_COLUMNS, *HEADLINE_KEYS, "source"}
    return [c for c in runs.columns if c not in skip and not re.fullmatch(r"[a-z]+_s", c)]


def _key(runs: pd.DataFrame, key: str, option: str) -> pd.Series:
    if key not in swept_keys(runs):
        keys = ", ".join(swept_keys(runs)) or "none"
        raise InputError(f"{option} {key}: no such parameter in these runs (swept keys: "
                         f"{keys})")
    return runs[key].map(value_text)


def _labels(paths: Sequence[Path]) -> list[str]:
    """Each path's folder name; the last two parts where names repeat."""
    names = [p.resolve().name for p in paths]
    if len(set(names)) < len(names):
        names = ["/".join(p.resolve().parts[-2:]) for p in paths]
    return names


def need_two(paths: Sequence[Path], by: str | None) -> None:
    """Refuse one path without ``by``: there would be one side."""
    if by is None and len(paths) < 2:
        raise InputError("give two or more result folders or runs to compare, or one "
                         "folder with --by KEY (e.g. --by controller.kind)")


def form_sides(runs: pd.DataFrame, paths: Sequence[Path], by: str | None,
               where: Sequence[str], labels: Sequence[str], warnings: list[str]
               ) -> list[tuple[str, pd.DataFrame]]:
    """The sides, A first: (label, runs) each.

    by: None (each path is a side) or ``KEY`` / ``KEY=V1,V2,...`` (the runs of all paths
    grouped by KEY's value; the listed values in their order, else all, sorted); where:
    ``KEY=VALUE`` filters applied first; labels: replace the default labels (one per side).
    """
    used = set()
    for w in where:
        key, sep, value = w.partition("=")
        if not sep:
            raise InputError(f"--where {w}: expected KEY=VALUE, e.g. controller.kind=spray")
        have = _key(runs, key, "--where")
        if not (have == value).any():
            raise InputError(f"--where {w}: no run has it ({key} here: "
                             f"{', '.join(sorted(set(have)))})")
        runs, used = runs[have == value], used | {key}
    if by is None:
        need_two(paths, by)
        names = _labels(paths)
        sides = [(names[i], runs[runs["source"] == i]) for i in range(len(paths))]
        for (_name, part), p in zip(sides, paths, strict=True):
            if not len(part):
                raise InputError(f"{p}: no run left after --where {' '.join(where)}")
    else:
        key, sep, listed = by.partition("=")
        have = _key(runs, key, "--by")
        lacking = sorted({int(i) for i in runs.loc[have == "", "source"]})
        if lacking:
            where_ = ", ".join(str(paths[i]) for i in lacking)
            raise InputError(f"--by {key}: the runs of {where_} do not set {key}, so they "
                             "would make a side without a value; leave that folder out, "
                             "or compare the folders side by side without --by")
        values = [v for v in listed.split(",") if v] if sep else \
            sorted(set(have), key=_order)
        for v in values:
            if not (have == v).any():
                raise InputError(f"--by {by}: no run has {key}={v} (values here: "
                                 f"{', '.join(sorted(set(have), key=_order))})")
        if len(values) < 2:
            raise InputError(f"--by {by}: {len(values)} value(s) of {key}; a comparison "
                             "needs two or more")
        names = [value_label(v, 40) for v in values]
        if len(set(names)) < len(names):
            names = list(values)
        sides = [(n, runs[have == v]) for n, v in zip(names, values, strict=True)]
        used.add(key)
    if labels:
        if len(labels) != len(sides):
            raise InputError(f"--label given {len(labels)} time(s) for {len(sides)} sides; "
                             "give one label per side, A first")
        sides = [(lab, part) for lab, (_n, part) in zip(labels, sides, strict=True)]
    for name, part in sides:
        specs = sorted(set(part["name"].map(value_text))) if "name" in part else []
        if len(specs) > 1:
            warnings.append(f"side {name} pools runs of different specs ({', '.join(specs)})")
        for key in swept_keys(part):
            vals = sorted(set(part[key].map(value_text)), key=_order)
            if key not in used and len(vals) > 1:
                warnings.append(f"side {name} pools runs with different {key} ("
                                f"{', '.join(v[:30] for v in vals)}): its numbers mix them; "
                                f"split with --by {key} or pick with --where {key}=VALUE")
    return sides


def _order(v: str) -> tuple[int, float, str]:
    try:
        return (0, float(v), v)
    except ValueError:
        return (1, 0.0, v)


def load_side(label: str, runs: pd.DataFrame) -> Side:
    """The side's metrics tables (flows, timeseries, rtt), stacked over its runs."""
    side = Side(label, runs.reset_index(drop=True))
    for table in ("flows", "timeseries", "rtt"):
        files = [(p, safefiles.file_in(Path(p), f"metrics/{table}.parquet"))
                 for p in side.runs["path"]]
        side.tables[table] = metrics_table(table, [(p, f) for p, f in files if f is not None]
                                           ).to_pandas()
    return side


# ---- the comparison ----------------------------------------------------------------------

def top_flows(flows: pd.DataFrame) -> pd.DataFrame:
    """The flows rows that are whole transfers (flows and MPTCP connections)."""
    if "kind" not in flows:
        return flows.iloc[0:0]
    return flows[flows["kind"].isin(TOP_KINDS)]


def _values(side: Side, m: Metric) -> tuple[np.ndarray, set[str]]:
    """A metric's values on a side (scaled) and the runs they come from."""
    if m.level == "run":
        data, run_col = side.runs, "path"
    elif m.level == "flow":
        data, run_col = top_flows(side.tables.get("flows", pd.DataFrame())), "run_id"
    else:
        data, run_col = side.tables.get("rtt", pd.DataFrame()), "run_id"
    if m.column not in data or not len(data):
        return np.array([]), set()
    vals = pd.to_numeric(data[m.column], errors="coerce")
    keep = vals.notna() & np.isfinite(vals)
    return vals[keep].to_numpy(float) * m.scale, set(data.loc[keep, run_col])


def _stat(xs: np.ndarray, stat: str) -> float:
    if not len(xs):
        return math.nan
    return float({"mean": np.mean, "median": np.median,
                  "p95": lambda a: np.percentile(a, 95)}[stat](xs))


def compare_pair(a: Side, b: Side) -> list[Row]:
    """Side b against side a (the reference): one `Row` per metric of `METRICS`."""
    rows = []
    bad_a, bad_b = a.not_ok(), b.not_ok()
    for m in METRICS:
        (xa, ra), (xb, rb) = _values(a, m), _values(b, m)
        est = difference(f"{b.label} - {a.label}, {m.unit}", list(xa), list(xb)) \
            if m.stat == "mean" else None
        rows.append(Row(m, _stat(xa, m.stat), _stat(xb, m.stat), est, (len(xa), len(xb)),
                        (bool(ra & bad_a), bool(rb & bad_b))))
    return rows


def flow_series(side: Side) -> pd.DataFrame:
    """Throughput per flow/connection on the run's clock: run_id, key, t_rel, bin_s,
    rate_bps (t_rel >= 0)."""
    ts = side.tables.get("timeseries", pd.DataFrame())
    need = {"kind", "key", "t_rel", "bin_s", "rate_bps"}
    if not len(ts) or not need <= set(ts.columns):
        return pd.DataFrame(columns=["run_id", *sorted(need - {"kind"})])
    ts = ts[ts["kind"].isin(TOP_KINDS) & (ts["t_rel"] >= 0)]
    return ts[["run_id", "key", "t_rel", "bin_s", "rate_bps"]]


def total_series(side: Side) -> pd.Series:
    """The sum over a run's flows/connections per bin, averaged over the side's runs (a
    run without a bin counts 0 there): rate (bit/s) indexed by t_rel."""
    fs = flow_series(side)
    if not len(fs):
        return pd.Series(dtype=float)
    per_run = fs.groupby(["run_id", "t_rel"])["rate_bps"].sum().unstack(fill_value=0.0)
    return per_run.reindex(list(side.runs["path"]), fill_value=0.0).mean(axis=0)
