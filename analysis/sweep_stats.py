"""What a sweep report draws and tabulates, computed from ``summary.parquet``.

* `swept_params` -- the summary columns that are swept parameters taking several values;
* `param_axis` -- how a parameter is drawn: *categorical* (workloads, controller kinds,
  congestion controls: grouped bars) or *numeric* (numbers, or rates, durations, sizes and
  percentages written with their unit: lines at their value, in the unit's base);
* `metric_values` -- a metric's value per run, with the values left out counted
  (`LeftOut`): a run that did not complete, or a complete run whose metric could not be
  measured (NaN), never counts as 0;
* `group_stats` -- per group of runs (one value of the parameter and of each other swept
  parameter) n, the mean and its Student t 95 % interval over repetitions
  (`analysis.evidence.mean_interval`; one run: no interval) and how many of the runs
  used have a fidelity verdict other than ``ok`` (`not_ok`).  An interval reaching past
  what the metric can be (below 0 for a count or rate, above 100 for a percentage: its
  `testbed.results.columns` bounds) is cut there and marked ``cut``: the mean cannot lie
  outside, so the cut interval still holds it with at least 95 % confidence.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analysis.evidence import mean_interval
from testbed.core import units
from testbed.core.errors import InputError
from testbed.results import columns
from testbed.results.summary import PROTECTED_COLUMNS


def swept_params(summary: pd.DataFrame) -> list[str]:
    """Swept parameters: summary columns that are neither run identity, fidelity, the
    seconds each run phase took (``setup_s``, ... -- never a dotted key path) nor headline
    metrics, and that take more than one value."""
    skip = set(PROTECTED_COLUMNS) | {c.name for c in columns.HEADLINE}
    return [c for c in summary.columns
            if c not in skip and not re.fullmatch(r"[a-z]+_s", c)
            and summary[c].nunique(dropna=True) > 1]


def _plain_number(v: object) -> float:
    """A number given as a number (not a bool, not text) as a float; else TypeError."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer,
                                                               np.floating)):
        raise TypeError(f"{v!r} is not a number")
    x = float(v)
    if not math.isfinite(x):
        raise ValueError(f"{v!r} is not finite")
    return x


# (unit of the parsed value, parser); a parameter is numeric when one parser reads all
# its values
_NUMERIC: tuple[tuple[str, Callable[[Any], float]], ...] = (
    ("", _plain_number), ("bit/s", units.parse_rate), ("s", units.parse_duration),
    ("bytes", units.parse_size), ("%", units.parse_percent))


@dataclass(frozen=True)
class ParamAxis:
    """How a swept parameter is drawn.

    name: the summary column; categorical: bars (True) or a line at each value (False);
    order: the values in display order (numeric: by value; categorical: by their text);
    unit: of the numeric positions ("" for plain numbers and categories); position:
    value -> number on the axis (numeric parameters only).
    """

    name: str
    categorical: bool
    order: list[Any]
    unit: str = ""
    position: dict[Any, float] = field(default_factory=dict)

    @property
    def log(self) -> bool:
        """A numeric axis spanning a factor of 20 or more (all positive) is logarithmic."""
        xs = list(self.position.values())
        return bool(xs) and min(xs) > 0 and max(xs) / min(xs) >= 20


def param_axis(summary: pd.DataFrame, param: str,
               name_of: Callable[[Any], str] = str) -> ParamAxis:
    """The axis of param: numeric when every value is a number, or every value parses as
    a rate, a duration, a size or a percentage; categorical otherwise (ordered by
    name_of(value), the label a person reads)."""
    values = list(pd.unique(summary[param].dropna()))
    for unit, parse in _NUMERIC:
        try:
            pos = {v: float(parse(v)) for v in values}
        except (InputError, TypeError, ValueError):
            continue
        return ParamAxis(param, False, sorted(values, key=lambda v: pos[v]), unit, pos)
    return ParamAxis(param, True, sorted(values, key=lambda v: (name_of(v), str(v))))


@dataclass(frozen=True)
class LeftOut:
    """Runs whose value of a metric is left out: not complete (failed, interrupted, ...),
    or complete but the metric could not be measured."""

    not_complete: int = 0
    not_measured: int = 0

    @property
    def total(self) -> int:
        return self.not_complete + self.not_measured

    def text(self) -> str:
        """'3 runs left out (1 not complete, 2 not measured)', or '' when none is."""
        if not self.total:
            return ""
        parts = [f"{n} {what}" for n, what in ((self.not_complete, "not complete"),
                                               (self.not_measured, "not measured")) if n]
        return f"{self.total} run{'s' if self.total > 1 else ''} left out " \
               f"({', '.join(parts)})"


def metric_values(summary: pd.DataFrame, metric: str) -> tuple[pd.Series, LeftOut]:
    """metric per run as floats, NaN where it is left out, and the count of those.

    A run counts only when its status is ``complete`` and its value is a finite number.
    """
    raw = summary[metric] if metric in summary else pd.Series(np.nan, index=summary.index)
    vals = pd.to_numeric(raw, errors="coerce").astype(float)
    vals = vals.where(np.isfinite(vals))
    complete = summary["status"].eq("complete") if "status" in summary \
        else pd.Series(True, index=summary.index)
    left = LeftOut(int((~complete).sum()), int((complete & vals.isna()).sum()))
    return vals.where(complete), left


def not_ok(summary: pd.DataFrame) -> pd.Series:
    """True for each run whose fidelity verdict is not ``ok`` (warn, fail, unknown)."""
    if "fidelity" not in summary:
        return pd.Series(True, index=summary.index)
    return summary["fidelity"].ne("ok")


def metric_bounds(metric: str) -> tuple[float | None, float | None]:
    """The least and greatest value a runs-view metric can take (None: no bound), from
    its column definition; a metric the contract does not declare has none."""
    for c in columns.table("runs").columns:
        if c.name == metric:
            return c.bounds()
    return None, None


def group_stats(summary: pd.DataFrame, metric: str, keys: Sequence[str]) -> pd.DataFrame:
    """One row per group of runs sharing the values of keys (swept parameters).

    Columns: each key, ``runs`` (rows of the group), ``n`` (values used), ``mean``,
    ``low`` and ``high`` (Student t 95 % interval, NaN with fewer than two values, cut at
    the metric's bounds: `metric_bounds`), ``cut`` (True where it was),
    ``not_ok`` (runs used whose fidelity is not ok), ``runs_not_ok`` (runs of the group
    whose fidelity is not ok, used or not).  No keys: one group of all runs.
    """
    summary = summary.reset_index(drop=True)  # rows are matched by their index below
    vals, _left = metric_values(summary, metric)
    bad = not_ok(summary)
    groups = summary.groupby(list(keys), dropna=False, sort=False) if keys \
        else [((), summary)]
    least, most = metric_bounds(metric)
    rows = []
    for key, g in groups:
        used = vals.loc[g.index].dropna()
        mean, low, high, n = mean_interval(used.tolist())
        cut = False
        if low is not None and least is not None and low < least:
            low, cut = least, True
        if high is not None and most is not None and high > most:
            high, cut = most, True
        rows.append({**dict(zip(keys, key, strict=True)), "runs": len(g), "n": n,
                     "mean": mean, "low": math.nan if low is None else low,
                     "high": math.nan if high is None else high, "cut": cut,
                     "not_ok": int(bad.loc[used.index].sum()),
                     "runs_not_ok": int(bad.loc[g.index].sum())})
    return pd.DataFrame(rows, columns=[*keys, "runs", "n", "mean", "low", "high", "cut",
                                       "not_ok", "runs_not_ok"])


def sweep_notes(summary: pd.DataFrame, param: str, metric: str, others: Sequence[str],
                categorical: bool) -> list[str]:
    """What a figure of metric vs param says besides its data: how to read it, groups of
    one run (no interval), runs left out, runs whose fidelity is not ok."""
    stats = group_stats(summary, metric, [*others, param])
    used = stats[stats["n"] > 0]
    thing = "bar" if categorical else "point"
    single = bool(len(used)) and bool((used["n"] == 1).all())
    notes = [("bars: mean" if single else
              "bars: mean, whiskers: 95 % Student t interval over repetitions") if categorical
             else ("line: mean" if single else
                   "line: mean, band: 95 % Student t interval over repetitions"),
             "dots: each run"]
    if single:
        notes.append(f"1 run per {thing}, no interval")
    elif (used["n"] == 1).any():
        notes.append(f"{thing}s of 1 run have no interval")
    if bool(used["cut"].any()):
        notes.append("intervals cut where the metric ends (it cannot be below 0, or a "
                     "share above 100 %)")
    if metric in ("reorder_ratio_mean", "ooo_percent"):
        notes.append("an MPTCP connection counts its data arriving out of data-sequence "
                     "order, as its paths' delays differ: not packets the network reordered")
    _vals, left = metric_values(summary, metric)
    if left.total:
        notes.append(left.text())
    bad = int(used["not_ok"].sum())
    if bad:
        notes.append(f"{bad} run{'s' if bad > 1 else ''} with fidelity not ok (red \u00d7)")
    return notes
