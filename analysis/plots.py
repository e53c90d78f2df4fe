"""Figures (matplotlib, Agg backend): each function returns a Figure; `save` writes PNG + SVG.

* `throughput_figure` -- rate vs time per path / subflow / flow, schedule events marked;
* `cwnd_figure` -- congestion window vs time per subflow;
* `sweep_figure` -- a metric vs a swept parameter, mean and 95 % interval over
  repetitions: grouped bars for a categorical parameter, a line with a band for a numeric
  one (`analysis.sweep_stats` computes what is drawn);
* `fct_cdf_figure` -- CDF of flow completion times;
* `sides_series_figure`, `sides_cdf_figure` -- a comparison's sides overlaid
  (`testbed compare`): time series, and CDFs of samples.
"""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import contextlib

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from analysis import sweep_stats
from testbed.core.safefiles import atomic_write
from testbed.spec.sweep import value_name

METRIC_LABELS = {
    "throughput_bps_mean": ("throughput", "Mbit/s", 1e-6),
    "fct_s_median": ("median FCT", "ms", 1e3),
    "reorder_ratio_mean": ("reordered packets, RFC 4737, mean of flows", "%", 100.0),
    "retransmissions": ("retransmissions", "packets", 1.0),
    "bytes": ("data bytes carried (each byte once)", "MB", 1e-6),
    "ooo_percent": ("reordered packets, RFC 4737, all data", "%", 1.0),
    "long_throughput_bps_mean": ("long-flow throughput", "Mbit/s", 1e-6),
    "short_fct_s_mean": ("short-flow FCT", "ms", 1e3),
}


def _fig(title: str) -> tuple[Figure, plt.Axes]:
    fig = Figure(figsize=(7.5, 3.8), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    return fig, ax


def throughput_figure(ts: pd.DataFrame, kind: str = "path", events: pd.DataFrame | None = None,
                      title: str | None = None) -> Figure:
    """Rate vs time, one line per key of `kind` in a timeseries table.

    ts: metrics/timeseries table; kind: path | subflow | flow | connection | iface;
    events: metrics/events table (vertical lines at t_rel or t_applied).
    """
    fig, ax = _fig(title or f"Throughput per {kind}")
    sub = ts[ts["kind"] == kind]
    for key, g in sub.groupby("key"):
        g = g.sort_values("t_rel")
        width = float(g["bin_s"].iloc[0]) if "bin_s" in g else 0.1
        edges = np.r_[g["t_rel"].to_numpy(float), float(g["t_rel"].iloc[-1]) + width]
        ax.stairs(g["rate_bps"].to_numpy(float) / 1e6, edges, label=str(key), lw=1.3)
    if events is not None and len(events):
        tcol = "t_rel" if "t_rel" in events else "t_applied"
        for _, e in events.iterrows():
            if pd.notna(e[tcol]):
                ax.axvline(e[tcol], color="0.3", ls="--", lw=1)
                ax.annotate(str(e.get("link", "")), (e[tcol], 1),
                            xycoords=("data", "axes fraction"), fontsize=8, rotation=90,
                            va="top", ha="right")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("throughput (Mbit/s)")
    if len(sub):
        ax.legend(fontsize=7, loc="best")
    return fig


def cwnd_figure(cwnd: pd.DataFrame, t0: float | None = None) -> Figure:
    """Congestion window (segments) vs time, one line per subflow of a cwnd table."""
    fig, ax = _fig("Congestion window")
    if len(cwnd):
        t = cwnd["t_rel"] if "t_rel" in cwnd else cwnd["t"] - (t0 or cwnd["t"].min())
        key = (cwnd["host"].astype(str) + " " + cwnd["src_addr"].astype(str) + ":"
               + cwnd["sport"].astype(str))
        for k, g in cwnd.assign(_t=t, _k=key).groupby("_k"):
            ax.plot(g["_t"], g["cwnd"].astype(float), label=k, lw=1)
        ax.legend(fontsize=7, loc="best")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("cwnd (segments)")
    return fig


def value_label(v: object, width: int = 28) -> str:
    """A short axis/legend label for a swept value.

    Sweeps over whole tables or lists (P0 swaps a workload table) store them as JSON
    text; those are named by their ``name`` fields (``tcp-wifi``, ``mptcp+video``).
    Anything else is its text, cut to width characters.
    """
    text = str(v)
    if text[:1] in "[{":
        with contextlib.suppress(ValueError):
            text = value_name(json.loads(text))
    return text if len(text) <= width else text[:width - 1] + "\u2026"


_AXIS_KIND = {"bit/s": "rate", "s": "duration", "bytes": "size", "%": "percentage"}


def _line_groups(summary: pd.DataFrame, others: list[str]
                 ) -> list[tuple[str, pd.DataFrame]]:
    """(legend label, runs) per combination of the other swept parameters, in the order
    of their values (numbers by value, names alphabetically)."""
    if not others:
        return [("", summary)]
    ranks = [{v: i for i, v in enumerate(sweep_stats.param_axis(summary, p, value_label)
                                        .order)} for p in others]
    out = [(tuple(rank.get(v, len(rank)) for v, rank in zip(key, ranks, strict=True)),
            ", ".join(value_label(v) for v in key), g)
           for key, g in summary.groupby(others, dropna=False, sort=False)]
    return [(name, g) for _rank, name, g in sorted(out, key=lambda item: item[:2])]


def _runs_dots(ax: plt.Axes, xs: np.ndarray, ys: np.ndarray, bad: np.ndarray,
               colour: str) -> None:
    """Each run's value: a dot, or a red cross when its fidelity is not ok."""
    ax.scatter(xs[~bad], ys[~bad], s=9, color=colour, zorder=3)
    ax.scatter(xs[bad], ys[bad], s=36, marker="x", color="red", zorder=4)


def sweep_figure(summary: pd.DataFrame, param: str, metric: str,
                 policy: list[str] | None = None, order: list | None = None) -> Figure:
    """metric vs param over the runs of a sweep, mean and 95 % interval over repetitions.

    A categorical param (workloads, controller kinds, congestion controls) gives grouped
    bars with Student t 95 % whiskers; a numeric one (numbers; rates, durations, sizes,
    percentages) a line with a shaded 95 % band, at each value's position.  Single runs
    are dots, those whose fidelity is not ok red crosses; runs not complete and values
    not measured are left out (never drawn as 0) and counted in the note under the axes.

    summary: one row per run; param: swept column (x axis); metric: column (y axis);
    policy: the other swept columns, whose combination names a bar colour / line (legend
    labels are value names); order: categorical x values in display order.
    """
    label, unit, scale = METRIC_LABELS.get(metric, (metric, "", 1.0))
    summary = summary.reset_index(drop=True)  # rows are matched by their index below
    axis = sweep_stats.param_axis(summary, param, value_label)
    xs = list(order) if order is not None and axis.categorical else axis.order
    others = list(policy or [])
    fig, ax = _fig(f"{label} vs {param}")
    ax.set_axisbelow(True)
    vals, _left = sweep_stats.metric_values(summary, metric)
    bad = sweep_stats.not_ok(summary)
    groups = _line_groups(summary, others)
    width = 0.8 / len(groups)
    for i, (name, g) in enumerate(groups):
        colour = f"C{i % 10}"
        st = {r[param]: r for r in sweep_stats.group_stats(g, metric, [param])
              .to_dict("records") if r["n"] > 0}
        used = vals.loc[g.index].notna() & g[param].isin(xs)
        if axis.categorical:
            pos = {x: j - 0.4 + width * (i + 0.5) for j, x in enumerate(xs)}
            named = False
            for x in xs:
                if x not in st:
                    ax.text(pos[x], 0.02, "no value", rotation=90, fontsize=7, color="0.4",
                            ha="center", va="bottom",
                            transform=ax.get_xaxis_transform())
                    continue
                r = st[x]
                ax.bar(pos[x], r["mean"] * scale, width * 0.9, color=colour, alpha=0.75,
                       label=None if named or not name else name)
                named = True
                if r["n"] > 1:
                    ax.errorbar(pos[x], r["mean"] * scale, yerr=[[(r["mean"] - r["low"])
                                * scale], [(r["high"] - r["mean"]) * scale]],
                                color="black", capsize=4, lw=1.2)
        else:
            pos = axis.position
            pts = sorted((pos[x], st[x]) for x in xs if x in st)
            px = np.array([p for p, _r in pts])
            ax.plot(px, [r["mean"] * scale for _p, r in pts], marker="o", color=colour,
                    label=name or None)
            ax.fill_between(px, [r["low"] * scale for _p, r in pts],
                            [r["high"] * scale for _p, r in pts], color=colour, alpha=0.2,
                            lw=0)
        _runs_dots(ax, g.loc[used, param].map(pos).to_numpy(float),
                   vals.loc[g.index][used].to_numpy(float) * scale,
                   bad.loc[g.index][used].to_numpy(bool),
                   "0.15" if axis.categorical else colour)
    if axis.categorical:
        ax.set_xticks(range(len(xs)), [value_label(v) for v in xs])
        ax.set_xlabel(param)
    else:
        if axis.log:
            ax.set_xscale("log")
            ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks([axis.position[x] for x in xs], [value_label(v) for v in xs])
        extra = [k for k in (_AXIS_KIND.get(axis.unit), "log scale" if axis.log else None)
                 if k]
        ax.set_xlabel(f"{param} ({', '.join(extra)})" if extra else param)
    ax.set_ylabel(f"{label} ({unit})" if unit else label)
    ax.set_ylim(bottom=min(0.0, ax.get_ylim()[0]))
    if others:
        ax.legend(title=", ".join(others), fontsize=7, title_fontsize=7,
                  loc="upper left", bbox_to_anchor=(1.01, 1.0))
    notes = sweep_stats.sweep_notes(summary, param, metric, others, axis.categorical)
    fig.supxlabel(textwrap.fill("; ".join(notes), 125), fontsize=7, color="0.3")
    return fig


def fct_cdf_figure(flows: pd.DataFrame) -> Figure:
    """CDF of flow completion times (ms) of the top-level flows of a flows table."""
    fig, ax = _fig("Flow completion time")
    top = flows[flows["parent"].fillna("") == ""]
    fct = np.sort(pd.to_numeric(top["fct_s"], errors="coerce").dropna().to_numpy()) * 1e3
    if len(fct):
        y = np.arange(1, len(fct) + 1) / len(fct)
        ax.step(np.r_[fct[0], fct], np.r_[0.0, y], where="post")
        ax.plot(fct, y, "o", ms=3)
    ax.set_xlabel("flow completion time (ms)")
    ax.set_ylabel("fraction of flows (CDF)")
    ax.set_ylim(0, 1.02)
    return fig


SIDE_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def sides_series_figure(series: list[tuple[str, pd.DataFrame]], title: str) -> Figure:
    """Throughput (Mbit/s) vs the run's clock, one colour per side: a line per series.

    series: (side label, frame with ``line``, ``t_rel``, ``bin_s``, ``rate_bps``) per side;
    every ``line`` of a side is drawn in its colour, the side named once in the legend.
    """
    fig, ax = _fig(title)
    for i, (label, df) in enumerate(series):
        colour = SIDE_COLORS[i % len(SIDE_COLORS)]
        lines = list(df.groupby("line")) if len(df) else []
        for j, (_line, g) in enumerate(lines):
            width = float(g["bin_s"].iloc[0])  # a bin the series lacks is drawn as 0
            k = np.round(g["t_rel"].to_numpy(float) / width).astype(int)
            rates = np.zeros(k.max() - k.min() + 1)
            np.add.at(rates, k - k.min(), g["rate_bps"].to_numpy(float) / 1e6)
            edges = (k.min() + np.arange(len(rates) + 1)) * width
            ax.stairs(rates, edges, color=colour,
                      lw=1.6 if len(lines) == 1 else 0.8, alpha=1.0 if len(lines) == 1 else 0.5,
                      label=label if j == 0 else None)
    ax.set_xlabel("time since the run's start, t_rel (s)")
    ax.set_ylabel("throughput (Mbit/s)")
    if any(len(df) for _l, df in series):
        ax.legend(fontsize=7, loc="best")
    return fig


def sides_cdf_figure(samples: list[tuple[str, np.ndarray]], title: str, xlabel: str
                     ) -> Figure:
    """Empirical CDFs, one per side (at most 2000 points drawn per side).

    samples: (side label, values in the unit of xlabel) per side.
    """
    fig, ax = _fig(title)
    for i, (label, xs) in enumerate(samples):
        xs = np.sort(np.asarray(xs, float))
        if not len(xs):
            continue
        y = np.arange(1, len(xs) + 1) / len(xs)
        if len(xs) > 2000:
            pick = np.linspace(0, len(xs) - 1, 2000).astype(int)
            xs, y = xs[pick], y[pick]
        ax.step(np.r_[xs[0], xs], np.r_[0.0, y], where="post",
                color=SIDE_COLORS[i % len(SIDE_COLORS)],
                label=f"{label} (n={len(samples[i][1])})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction (CDF)")
    ax.set_ylim(0, 1.02)
    if any(len(xs) for _l, xs in samples):
        ax.legend(fontsize=7, loc="best")
    return fig


def to_svg(fig: Figure) -> str:
    """The figure as an inline SVG document (text)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    return buf.getvalue()


def to_png(fig: Figure) -> bytes:
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def save(fig: Figure, base: Path, svg_text: str | None = None) -> list[Path]:
    """Write base.png and base.svg atomically; returns both paths.

    svg_text: the figure's SVG if already rendered (saves rendering it twice).
    """
    png, svg = base.with_suffix(".png"), base.with_suffix(".svg")
    atomic_write(png, lambda p: p.write_bytes(to_png(fig)))
    text = svg_text if svg_text is not None else to_svg(fig)
    atomic_write(svg, lambda p: p.write_text(text, encoding="utf-8"))
    return [png, svg]
