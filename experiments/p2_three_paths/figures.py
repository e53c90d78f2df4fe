"""P2's figures redrawn from our runs: throughput and cwnd per path (the paper's
Wireshark IO graphs and window-scaling plots).

One panel per value of the spec's sweep (``bandwidth``: path 2's rate; ``cc`` and
``loss``: the congestion control), a line per path.  The paper gives screenshots only
(no numbers), so nothing of it is overlaid; its one table (the ping test) is laid out as
the paper's by ``study.py`` (`ping_table`).  A congestion control the variant does not
run (``loss`` runs cubic only in the quick variant) gets an empty panel saying so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from analysis.study_figures import (
    StudyFigure,
    axes,
    cwnd_with_path,
    legend,
    no_data,
    rate_stairs,
)
from analysis.study_tables import resolved_spec, run_table

XLABEL = "time since the run's start (s)"
CCS = ("cubic", "reno")


def figures(paper: dict[str, Any], out: Path) -> list[StudyFigure]:
    """P2's figures from the results in out (one folder per spec)."""
    bw_key = "param:topology.paths.1.bw"
    ts = run_table(out / "bandwidth", "timeseries")
    bws = sorted(ts[bw_key].astype(str).unique(), key=_mbit) if bw_key in ts else []
    return [
        _throughput(out / "bandwidth", bw_key, bws, "path 2 at",
                    "Experiment 1: throughput per path, path 2's rate varied (bandwidth)"),
        _throughput(out / "cc", "param:transport.cc", list(CCS), "",
                    "Experiment 2: throughput per path, cubic vs reno (cc)"),
        _cwnd(out / "cc", "Experiment 2: congestion window per path, cubic vs reno (cc)"),
        _throughput(out / "loss", "param:transport.cc", list(CCS), "",
                    "Experiment 3: throughput per path under 10 % loss (loss)"),
    ]


def _mbit(text: str) -> float:
    """A rate such as "2.5Mbit" as a number of Mbit/s for ordering (0 when unreadable)."""
    try:
        return float(text.lower().removesuffix("mbit"))
    except ValueError:
        return 0.0


def _runs_of(spec_out: Path, table: pd.DataFrame, key: str, value: str) -> pd.DataFrame:
    """The rows of the runs with key == value; a spec without that sweep counts as the
    value of its resolved spec (``transport.cc``)."""
    if key in table:
        return table[table[key].astype(str) == value]
    spec = resolved_spec(spec_out) or {}
    fixed = spec.get("transport", {}).get("cc") if key == "param:transport.cc" else None
    return table if fixed == value else table.iloc[0:0]


def _throughput(spec_out: Path, key: str, values: list[str], prefix: str, title: str
                ) -> StudyFigure:
    """Throughput per path, one panel per value of key."""
    ts = run_table(spec_out, "timeseries")
    values = values or ["(no runs)"]
    fig, axs = axes(title, XLABEL, "throughput (Mbit/s)", ncols=len(values))
    for ax, value in zip(axs, values, strict=True):
        ax.set_title(f"{prefix} {value}".strip(), fontsize=9)
        sel = _runs_of(spec_out, ts, key, value) if len(ts) else ts
        paths = sel[sel["kind"] == "path"] if len(sel) else sel
        if paths.empty:
            no_data(ax, f"no run with {value} in this variant")
            continue
        for path, g in paths.groupby("key"):
            rate_stairs(ax, g, str(path), lw=1.2)
        legend(ax)
    name = spec_out.name
    return StudyFigure(f"p2-{name}-throughput", title,
                       "What each path carried (all traffic on the path's link), mean "
                       "over runs.  The paper shows IO-graph screenshots without numbers, "
                       "so nothing is overlaid.", fig)


def _cwnd(spec_out: Path, title: str) -> StudyFigure:
    """The sender's congestion window per path (ss samples), one panel per cc."""
    cwnd = run_table(spec_out, "cwnd")
    flows = run_table(spec_out, "flows")
    joined = cwnd_with_path(cwnd, flows)
    fig, axs = axes(title, XLABEL, "cwnd (segments)", ncols=len(CCS))
    for ax, cc in zip(axs, CCS, strict=True):
        ax.set_title(cc, fontsize=9)
        sel = _runs_of(spec_out, joined, "param:transport.cc", cc) if len(joined) else joined
        if sel.empty:
            no_data(ax, f"no cwnd samples with {cc} in this variant")
            continue
        for (run, path), g in sel.groupby(["run_id", sel["path"].fillna("unknown path")]):
            g = g.sort_values("t_rel")
            ax.plot(g["t_rel"], pd.to_numeric(g["cwnd"], errors="coerce"), lw=1.1,
                    label=str(path) if sel["run_id"].nunique() == 1 else f"{path} ({run})")
        legend(ax)
    return StudyFigure(f"p2-{spec_out.name}-cwnd", title,
                       "cwnd of each subflow as the sender's kernel reported it (ss), "
                       "named by the path its flow used.  The paper shows path 1's window "
                       "scaling only as a screenshot, so nothing is overlaid.", fig)
