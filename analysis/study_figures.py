"""The figures of a study report: the paper's figures redrawn from our runs, paper overlaid.

A study's ``figures(paper, out)`` (in ``experiments/<study>/``, found by
`analysis.study_registry`) returns `StudyFigure` s; `write_figures` saves each as a PNG in
the study output folder's ``report-figures/`` (never in a run bundle), and the report
(`analysis.study_report`) embeds them.  The shared drawing pieces live here:

* `axes` -- a new figure with one titled, labelled axes;
* `rate_stairs` -- a throughput series (Mbit/s) on the run's clock ``t_rel``;
* `paper_line`, `paper_points` -- the paper's values, black dashed line or black crosses,
  always labelled "paper ...";
* `no_data` -- what the figure lacks, written into it (a missing series is never drawn
  as zeros);
* `mean_ci` -- a mean and its Student's t 95 % half-width over repetitions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis import plots
from analysis.evidence import t_quantile
from analysis.study_tables import numeric
from testbed.core import safefiles
from testbed.core.errors import InputError
from testbed.core.safefiles import atomic_write

FIGURES_DIR = "report-figures"  # in the study output folder, beside report.html
PAPER_STYLE = {"color": "black", "ls": "--", "lw": 1.4}


@dataclass
class StudyFigure:
    """One redrawn figure. name: file stem; title: its heading; caption: what it shows,
    where the paper's values come from and what is missing."""

    name: str
    title: str
    caption: str
    figure: Figure


def axes(title: str, xlabel: str, ylabel: str, ncols: int = 1, sharey: bool = True
         ) -> tuple[Figure, list[Axes]]:
    """A titled figure of ncols side-by-side axes (sharing y), each with a grid.

    xlabel, ylabel: every axes' x label and the first one's y label.
    """
    fig = Figure(figsize=(7.5 if ncols == 1 else min(3.6 * ncols, 11.0), 3.8), dpi=100,
                 layout="constrained")
    axs = list(np.atleast_1d(fig.subplots(1, ncols, sharey=sharey)))
    fig.suptitle(title)
    for ax in axs:
        ax.grid(True, alpha=0.3)
        ax.set_xlabel(xlabel)
    axs[0].set_ylabel(ylabel)
    return fig, axs


def rate_stairs(ax: Axes, series: pd.DataFrame, label: str, scale: float = 1e-6,
                **style: object) -> None:
    """Draw one throughput series as steps on t_rel (bit/s x scale: Mbit/s by default).

    series: timeseries rows of one line (``t_rel``, ``bin_s``, ``rate_bps`` or
    ``goodput_bps``), possibly of several runs: their bins are averaged.  A bin inside the
    series' span that no row covers carried no data: it is drawn at 0, as the sender
    sent nothing then.
    """
    if series.empty:
        return
    width = float(numeric(series["bin_s"]).iloc[0])
    rate = numeric(series["goodput_bps"]).fillna(numeric(series["rate_bps"])) \
        if "goodput_bps" in series else numeric(series["rate_bps"])
    k = np.round(numeric(series["t_rel"]).to_numpy(float) / width).astype(int)
    per_bin = pd.Series(rate.to_numpy(float) * scale).groupby(k).sum()
    runs = series["run_id"].nunique() if "run_id" in series else 1
    full = per_bin.reindex(range(k.min(), k.max() + 1), fill_value=0.0) / runs
    edges = (np.arange(k.min(), k.max() + 2)) * width
    ax.stairs(full.to_numpy(), edges, label=label, **style)


def top_level(flows: pd.DataFrame) -> pd.DataFrame:
    """The connection-level rows of a flows table (TCP/UDP flows, MPTCP connections)."""
    return flows[flows["parent"].fillna("") == ""] if len(flows) else flows


def workload_series(ts: pd.DataFrame, flows: pd.DataFrame, workloads: Sequence[str],
                    runs: Sequence[str] | None = None) -> pd.DataFrame:
    """The goodput of the named workloads' top-level flows, summed per run and bin.

    ts, flows: `run_table` timeseries and flows; workloads: workload names; runs: run ids
    (None: all).  A TCP flow counts what its receiver acknowledged ("delivered"; "flow"
    in runs analysed before that series existed), an MPTCP connection its "connection"
    series.  Columns run_id, t_rel, bin_s, rate_bps; empty when nothing matches.
    """
    cols = ["run_id", "t_rel", "bin_s", "rate_bps"]
    if ts.empty or flows.empty:
        return pd.DataFrame(columns=cols)
    top = top_level(flows)
    top = top[top["workload"].isin(list(workloads))]
    if runs is not None:
        top = top[top["run_id"].isin(list(runs))]
    wanted = set(zip(top["run_id"], top["flow_id"], strict=True))
    with_delivered = set(ts.loc[ts["kind"] == "delivered", "run_id"])
    kind = ts["kind"]
    use = (kind.isin(["connection", "delivered"])
           | ((kind == "flow") & ~ts["run_id"].isin(with_delivered)))
    sel = ts[use]
    sel = sel[[(r, k) in wanted for r, k in zip(sel["run_id"], sel["key"], strict=True)]]
    if sel.empty:
        return pd.DataFrame(columns=cols)
    rate = numeric(sel["goodput_bps"]).fillna(numeric(sel["rate_bps"]))
    sel = sel.assign(rate_bps=rate, _bin=numeric(sel["t_rel"]).round(6))
    out = sel.groupby(["run_id", "_bin"], as_index=False).agg(
        bin_s=("bin_s", "first"), rate_bps=("rate_bps", "sum"))
    return out.rename(columns={"_bin": "t_rel"})[cols]


def paper_line(ax: Axes, y: float, label: str, horizontal: bool = True) -> None:
    """The paper's value as a black dashed line (horizontal at y, or vertical at x=y)."""
    if horizontal:
        ax.axhline(y, label=f"paper: {label}", **PAPER_STYLE)
    else:
        ax.axvline(y, label=f"paper: {label}", **PAPER_STYLE)


def paper_points(ax: Axes, xs: Sequence[float], ys: Sequence[float], label: str = "paper"
                 ) -> None:
    """The paper's values as black crosses at (xs, ys)."""
    ax.plot(list(xs), list(ys), "x", color="black", ms=9, mew=2, ls="none", label=label)


def no_data(ax: Axes, text: str, y: float = 0.5) -> None:
    """Say in the axes what is missing (grey box at height y of the axes)."""
    ax.text(0.5, y, text, transform=ax.transAxes, ha="center", va="center", fontsize=9,
            color="0.25", wrap=True,
            bbox={"boxstyle": "round", "fc": "#f3f3f3", "ec": "0.6"})


def legend(ax: Axes) -> None:
    """A legend when something is labelled."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")


def mean_ci(values: Sequence[float]) -> tuple[float, float | None]:
    """(mean, half-width of Student's t 95 % interval); half-width None under 2 values."""
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not xs:
        return math.nan, None
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, None
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return m, t_quantile(0.975, len(xs) - 1) * sd / math.sqrt(len(xs))


def bars_with_ci(ax: Axes, labels: Sequence[str], per_label: Sequence[Sequence[float]],
                 **style: object) -> None:
    """One bar per label: the mean over its repetitions, 95 % interval as error bar.

    A label without values gets no bar and a "no runs" mark instead of a zero bar.
    """
    for i, (_label, values) in enumerate(zip(labels, per_label, strict=True)):
        m, half = mean_ci(values)
        if math.isnan(m):
            ax.annotate("no runs", (i, 0), ha="center", va="bottom", fontsize=8,
                        xycoords=("data", "axes fraction"))
            continue
        ax.bar(i, m, yerr=None if half is None else half, capsize=4, **style)
        n = len([v for v in values if not math.isnan(v)])
        ax.annotate(f"n={n}", (i, m), ha="center", va="bottom", fontsize=7,
                    xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(range(len(labels)), list(labels))


def cwnd_with_path(cwnd: pd.DataFrame, flows: pd.DataFrame) -> pd.DataFrame:
    """The cwnd table with each socket's ``path`` and ``workload`` from the flows table.

    Joined on run, source address and port (a subflow's or a flow's sender socket);
    sockets no flow names keep NaN.
    """
    if cwnd.empty or flows.empty:
        return cwnd.assign(path=pd.Series(dtype=object), workload=pd.Series(dtype=object))
    keys = ["run_id", "src_addr", "sport"]
    names = flows[[*keys, "path", "workload"]].drop_duplicates(keys)
    left = cwnd.assign(sport=numeric(cwnd["sport"]).astype("Int64"),
                       src_addr=cwnd["src_addr"].astype(str))
    right = names.assign(sport=numeric(names["sport"]).astype("Int64"),
                         src_addr=names["src_addr"].astype(str))
    return left.merge(right, on=keys, how="left")


def write_figures(figures: Sequence[StudyFigure], out: Path) -> list[tuple[StudyFigure, str]]:
    """Save each figure as out/report-figures/<name>.png; (figure, relative href) each.

    A PNG an earlier render left there that this one does not draw (a study that draws
    fewer figures now) is removed, so the folder holds exactly the report's figures; a
    link among them is removed as a link, never followed, and nothing else is touched."""
    folder = out / FIGURES_DIR
    why = safefiles.check(out, folder, "dir")
    if why not in (None, "missing"):  # a link planted there would take the figures away
        raise InputError(f"{folder}: {why}; the study report writes its figures only into "
                         "a folder of its own: remove it and make the report again")
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for f in figures:
        png = folder / f"{f.name}.png"
        data = plots.to_png(f.figure)
        atomic_write(png, lambda p, data=data: p.write_bytes(data))
        written.append((f, f"{FIGURES_DIR}/{png.name}"))
    drawn = {f"{f.name}.png" for f in figures}
    for old in folder.iterdir():
        if old.suffix == ".png" and old.name not in drawn and not old.is_dir():
            old.unlink(missing_ok=True)
    return written
