"""The sweep section of a sweep report: each metric against each swept parameter, the
means over repetitions and the runs.

Figures (`analysis.plots.sweep_figure`): grouped bars for a categorical parameter, a line
with a shaded band for a numeric one, 95 % Student t intervals over repetitions, the other
swept parameters as bar colours / lines.  Tables: one row per sweep point (every swept
parameter named by its value name, never JSON) with n, mean and interval per metric in
the unit of its figure, then one row per run.  What is computed is in
`analysis.sweep_stats`.
"""

from __future__ import annotations

import html
import math
from typing import Any

import pandas as pd

from analysis import plots, sweep_stats
from analysis.report_context import ReportContext, figure, html_table

NAME_WIDTH = 60  # a value name in a table cell is cut to this many characters


# why a headline metric can have no value in any run of a sweep (testbed.results.columns)
_WHY_NONE = {"long_throughput_bps_mean": "no flow of 1 MB or more",
             "short_fct_s_mean": "no flow under 100 KB with a completion time",
             "fct_s_median": "no flow with a completion time: each ran without a size or "
                             "was cut off",
             "ooo_percent": "no data packets captured at both ends"}


def _heading(metric: str) -> str:
    label, unit, _scale = plots.METRIC_LABELS.get(metric, (metric, "", 1.0))
    return f"{label} ({unit})" if unit else label


def number(v: float) -> str:
    """v for a table cell: 4 significant digits, whole numbers from 1000 on (11,024)."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def _cell(r: dict[str, Any], scale: float,
          bounds: tuple[float | None, float | None] = (None, None)) -> str:
    """'7.28 [6.93, 7.63] (n=3)'; one run: '7.28 (n=1, no interval)'; none: 'no value';
    an interval cut at the metric's bounds (`sweep_stats.group_stats`): '35 [0, 95.2] (n=3,
    cut at 0)'."""
    if not r["n"]:
        return "no value"
    mean = number(r["mean"] * scale)
    if r["n"] < 2 or math.isnan(r["low"]):
        return f"{mean} (n=1, no interval)"
    cut = ""
    if r.get("cut"):  # at the bound(s) it now equals (bounds: `sweep_stats.metric_bounds`)
        hit = [b for b, v in zip(bounds, (r["low"], r["high"]), strict=True) if b == v]
        cut = ", cut at " + " and ".join(number(b * scale) for b in hit if b is not None)
    return (f"{mean} [{number(r['low'] * scale)}, {number(r['high'] * scale)}] "
            f"(n={r['n']}{cut})")


def means_table(summary: pd.DataFrame, params: list[str], metrics: list[str]) -> pd.DataFrame:
    """One row per sweep point: the swept values by name, runs, runs whose fidelity is not
    ok, and per metric its mean [95 % interval] (n) over the complete runs that measured it.
    """
    keys = list(params)
    base = sweep_stats.group_stats(summary, metrics[0], keys) if metrics else \
        sweep_stats.group_stats(summary, "", keys)
    out = pd.DataFrame({p: base[p].map(lambda v: plots.value_label(v, NAME_WIDTH))
                        for p in keys})
    out["runs"] = base["runs"]
    out["fidelity not ok"] = base["runs_not_ok"]
    for m in metrics:
        _label, _unit, scale = plots.METRIC_LABELS.get(m, (m, "", 1.0))
        st = sweep_stats.group_stats(summary, m, keys)
        bounds = sweep_stats.metric_bounds(m)
        out[_heading(m) + ": mean [95 % interval] (n)"] = [
            _cell(r, scale, bounds) for r in st.to_dict("records")]
    if keys:
        ranks = [{v: i for i, v in enumerate(sweep_stats.param_axis(
            summary, p, plots.value_label).order)} for p in keys]
        rows = base[keys].to_dict("records")
        order = sorted(range(len(rows)), key=lambda i: tuple(
            rank.get(rows[i][p], len(rank)) for p, rank in zip(keys, ranks, strict=True)))
        out = out.iloc[order]
    return out


def runs_table(summary: pd.DataFrame, params: list[str], metrics: list[str]) -> pd.DataFrame:
    """One row per run: identity, status, fidelity, swept values by name, each metric in
    the unit of its figure ("" where it was not measured)."""
    cols = [c for c in ("run_id", "status", "fidelity", "repetition") if c in summary]
    out = summary[cols].copy()
    for p in params:
        out[p] = summary[p].map(lambda v: "" if v is None or v != v
                                else plots.value_label(v, NAME_WIDTH))
    for m in metrics:
        _label, _unit, scale = plots.METRIC_LABELS.get(m, (m, "", 1.0))
        vals = pd.to_numeric(summary[m], errors="coerce") * scale
        out[_heading(m)] = vals.map(lambda v: "" if v != v else number(v))
    return out


def sweep_section(ctx: ReportContext) -> str:
    """Each metric vs each swept parameter, the means over repetitions and the runs."""
    s = ctx.tables.get("summary")
    if s is None or not len(s):
        return "<h2>Sweep</h2><p><em>no runs</em></p>"
    s = s.reset_index(drop=True)
    params = sweep_stats.swept_params(s)
    metrics = [m for m in plots.METRIC_LABELS if m in s and pd.to_numeric(
        s[m], errors="coerce").notna().any()]
    out = ["<h2>Sweep</h2>"]
    absent = [m for m in plots.METRIC_LABELS if m not in metrics]
    if absent:  # said, not silently left out (e.g. no flow under 100 KB: no short-flow FCT)
        out.append("<p>Not drawn, as no run measured them: " + ", ".join(
            f"{html.escape(_heading(m))} ({html.escape(_WHY_NONE.get(m, 'no value'))})"
            for m in absent) + ".</p>")
    if "status" in s:
        for _, r in s[s["status"] != "complete"].iterrows():
            ctx.warnings.append(f"run {r.get('run_id', '?')} is {r['status']}")
    if not params:
        out.append("<p>No parameter takes more than one value: the runs are repetitions "
                   "of one point.</p>")
    for p in params:
        others = [q for q in params if q != p]
        axis = sweep_stats.param_axis(s, p, plots.value_label)
        for m in metrics:
            notes = sweep_stats.sweep_notes(s, p, m, others, axis.categorical)
            lines = f"; one {'bar colour' if axis.categorical else 'line'} per " \
                f"{', '.join(others)}" if others else ""
            out.append(figure(ctx, plots.sweep_figure(s, p, m, others or None),
                              f"{m}-vs-{p}",
                              f"{_heading(m)} vs {p}{lines}: " + "; ".join(notes) + "."))
    out.append("<h3>Means over repetitions</h3><p>Per sweep point: mean and Student t 95 % "
               "interval over the complete runs that measured the metric (n of them); one "
               "run has no interval.</p>" + html_table(means_table(s, params, metrics)))
    out.append("<h3>Runs</h3>" + html_table(runs_table(s, params, metrics)))
    return "".join(out)
