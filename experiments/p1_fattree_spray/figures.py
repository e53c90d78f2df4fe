"""P1's figures redrawn from our runs, per scenario (``static``, ``random``).

Per forwarding policy: the long flows' throughput, the short flows' FCT and their
out-of-order share (each the mean over runs of a per-run number, with the 95 % interval
over runs: `analysis.study_figures.bars_with_ci`), and the CDF of the short flows' FCTs.
The paper plots these against the number of long flows; our quick specs run one point,
so a policy is one bar.  The paper states one number, about 20 % of the short flows'
packets out of order with spraying in the randomised scenario (Fig. 7): drawn there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from analysis.study_figures import (
    StudyFigure,
    axes,
    bars_with_ci,
    legend,
    no_data,
    paper_points,
)
from analysis.study_tables import numeric, top_flows
from experiments.p1_fattree_spray.study import run_numbers

KEY = "param:controller.kind"
ORDER = ("single-path", "ecmp", "spray")


def figures(paper: dict[str, Any], out: Path) -> list[StudyFigure]:
    """P1's figures from the results in out (one folder per spec)."""
    ooo = (paper.get("figures") or {}).get("fig7_random_ooo", {}).get("values") or {}
    figs = []
    for spec_name, sources in (("static", "Figs. 2-4"), ("random", "Figs. 5-7")):
        flows = top_flows(out / spec_name)
        figs.append(_bars(spec_name, sources, flows,
                          ooo.get("spray") if spec_name == "random" else None))
        figs.append(_cdf(spec_name, flows))
    return figs


def _policies(flows: Any) -> list[str]:
    """The policies of a flows table in display order (unknown ones last)."""
    found = {str(p) for p in flows[KEY].unique()} if KEY in flows else set()
    return [p for p in ORDER if p in found] + sorted(found - set(ORDER))


def _bars(spec_name: str, sources: str, flows: Any, paper_ooo: float | None
          ) -> StudyFigure:
    """Long-flow throughput, short-flow FCT and out-of-order share per policy."""
    fig, axs = axes(f"{sources}: per forwarding policy ({spec_name})", "policy", "",
                    ncols=3, sharey=False)
    policies = _policies(flows)
    per_run = {p: [run_numbers(g) for _, g in flows[flows[KEY].astype(str) == p]
                   .groupby("run_id")] for p in policies}
    panels = (("long_mbit", "long-flow throughput (Mbit/s)"),
              ("short_fct_ms", "short-flow FCT (ms)"),
              ("short_ooo_pct", "short-flow packets out of order (%)"))
    for ax, (key, label) in zip(axs, panels, strict=True):
        ax.set_title(label, fontsize=9)
        if not policies:
            no_data(ax, f"no complete runs of {spec_name}")
            continue
        values = [[r[key] for r in per_run[p]] for p in policies]
        bars_with_ci(ax, policies, values, color="tab:blue", alpha=0.8)
        if all(np.isnan(v).all() for v in values):
            no_data(ax, "not measured in these runs")
    if paper_ooo is not None and "spray" in policies:
        paper_points(axs[2], [policies.index("spray")], [float(paper_ooo)],
                     f"paper: about {paper_ooo} % (Fig. 7)")
        legend(axs[2])
    note = ("The paper's 'about 20 %' out of order with spraying is marked."
            if paper_ooo is not None else
            "The paper plots these against the number of long flows and states no "
            "number for this scenario, so nothing is overlaid.")
    return StudyFigure(f"p1-{spec_name}-per-policy",
                       f"{sources} ({spec_name}): throughput, FCT and reordering per policy",
                       "Bars: the mean over runs of each run's mean over its flows; error "
                       "bars: 95 % interval over runs (none on one run); n: runs.  " + note,
                       fig)


def _cdf(spec_name: str, flows: Any) -> StudyFigure:
    """CDF of the short flows' completion times per policy (all runs pooled)."""
    fig, (ax,) = axes(f"Short-flow completion times ({spec_name})",
                      "flow completion time (ms)", "fraction of short flows (CDF)")
    policies = _policies(flows)
    for p in policies:
        sel = flows[(flows[KEY].astype(str) == p) & (flows["workload"] == "short")]
        fct = np.sort(numeric(sel["fct_s"]).dropna().to_numpy(float)) * 1e3
        if len(fct):
            y = np.arange(1, len(fct) + 1) / len(fct)
            ax.step(np.r_[fct[0], fct], np.r_[0.0, y], where="post",
                    label=f"{p} (n={len(fct)} flows)")
    if not policies:
        no_data(ax, f"no complete runs of {spec_name}")
    ax.set_ylim(0, 1.02)
    legend(ax)
    return StudyFigure(f"p1-{spec_name}-fct-cdf",
                       f"Short-flow FCT distribution ({spec_name})",
                       "Every short flow of every run of each policy.  The paper shows "
                       "mean FCTs only, so no CDF of the paper is overlaid.", fig)
