"""P4's figures redrawn from our runs: utilisation against the receive buffer (Fig. 7) and
the fast path's cwnd and receive window over time (Figs. 5-6).

Fig. 7: per scenario, the aggregate throughput as a share of the paths' total bandwidth
at each receive buffer (mean over runs, 95 % interval), with the only numbers the paper
states -- its own scheme's (SMT's) best and worst utilisation -- as dashed lines.  Figs.
5-6: cwnd per path of the ``simple`` spec per receive buffer.  The receiver's advertised
window is not among the bundle's tables, so the figure says so instead of drawing it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from analysis.claims import paper_figure
from analysis.study_figures import (
    StudyFigure,
    axes,
    bars_with_ci,
    cwnd_with_path,
    legend,
    no_data,
    paper_line,
)
from analysis.study_tables import resolved_spec, run_table, top_flows, workload_rates
from testbed.core.units import parse_rate, parse_size

KEY = "param:transport.rmem"
SCENARIOS = ("simple", "three_paths", "cross_traffic")


def figures(paper: dict[str, Any], out: Path) -> list[StudyFigure]:
    """P4's figures from the results in out (one folder per spec)."""
    return [_utilisation(paper, out), _windows(out / "simple")]


def _rmem_values(spec_out: Path, flows: pd.DataFrame) -> list[str]:
    """The receive buffers a spec's runs used, smallest first (the spec's own when not
    swept)."""
    if KEY in flows:
        return sorted(flows[KEY].astype(str).unique(), key=lambda v: float(parse_size(v)))
    spec = resolved_spec(spec_out) or {}
    return [str(spec.get("transport", {}).get("rmem", "default"))]


def _utilisation(paper: dict[str, Any], out: Path) -> StudyFigure:
    """Fig. 7: aggregate / total bandwidth per receive buffer, one panel per scenario."""
    fig, axs = axes("Fig. 7: aggregate throughput / total bandwidth vs receive buffer",
                    "receive buffer (transport.rmem)", "aggregate / total bandwidth (%)",
                    ncols=len(SCENARIOS))
    values = paper_figure(paper, "fig7_utilisation").get("values") or {}
    for ax, name in zip(axs, SCENARIOS, strict=True):
        ax.set_title(name, fontsize=9)
        spec = resolved_spec(out / name)
        flows = top_flows(out / name)
        if spec is None or flows.empty:
            no_data(ax, f"no complete runs of {name}")
            continue
        total = sum(float(parse_rate(p["bw"])) for p in spec["topology"]["paths"])
        rmems = _rmem_values(out / name, flows)
        shares = [[100 * r / total for r in workload_rates(
            flows, "transfer", {KEY: v} if KEY in flows else None)] for v in rmems]
        bars_with_ci(ax, rmems, shares, color="tab:blue", alpha=0.8)
        for key, label in (("smt_best", "SMT best"), ("smt_worst", "SMT worst")):
            if key in values:
                paper_line(ax, float(values[key]), f"{label} {values[key]} %")
        ax.set_ylim(0, 105)
    legend(axs[-1])
    return StudyFigure("p4-fig7-utilisation", "Fig. 7: utilisation against the receive "
                       "buffer", "Bars: mean over runs of the transfer's throughput over "
                       "the sum of the paths' rates; error bars: 95 % interval over runs "
                       "(none on one run); n: runs.  Dashed: the paper's own scheme's (SMT) "
                       "best and worst utilisation, the only numbers it states; which "
                       "scenario gave which is not stated.", fig)


def _windows(spec_out: Path) -> StudyFigure:
    """Figs. 5-6: cwnd per path over time per receive buffer; rwnd not measured."""
    cwnd = run_table(spec_out, "cwnd")
    flows = run_table(spec_out, "flows")
    joined = cwnd_with_path(cwnd, flows)
    rmems = _rmem_values(spec_out, flows) if len(flows) else ["(no runs)"]
    fig, axs = axes("Figs. 5-6: cwnd per path and receive window (simple)",
                    "time since the run's start (s)", "cwnd (segments)", ncols=len(rmems))
    for ax, rmem in zip(axs, rmems, strict=True):
        ax.set_title(f"rmem {rmem}", fontsize=9)
        sel = joined[joined[KEY].astype(str) == rmem] if KEY in joined else joined
        if sel.empty:
            no_data(ax, "no cwnd samples in these runs")
            continue
        for (run, path), g in sel.groupby(["run_id", sel["path"].fillna("unknown path")]):
            g = g.sort_values("t_rel")
            ax.plot(g["t_rel"], pd.to_numeric(g["cwnd"], errors="coerce"), lw=1,
                    drawstyle="steps-post",
                    label=f"cwnd, path {path}" if run == sorted(set(sel["run_id"]))[0]
                    else None, color={"a": "tab:blue", "b": "tab:orange"}.get(str(path)))
        no_data(ax, "receive window (rwnd): not measured;\nthe bundle has no series of it",
                y=0.85)
        legend(ax)
    return StudyFigure("p4-fig5-6-windows", "Figs. 5-6: cwnd and receive window over time",
                       "cwnd of each subflow as the sender's kernel reported it (ss), every "
                       "run of each receive buffer, coloured by path.  The paper plots "
                       "normalised cwnd, rwnd and throughput of path B; the receiver's "
                       "advertised window is not recorded in our bundles, so it is "
                       "missing here (not drawn as zero).", fig)
