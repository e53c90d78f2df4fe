"""P3's figures redrawn from our runs: throughput and cwnd around each hand-off.

One figure per ``case*`` spec (and ``mptcp_handover``): left, what the receiver got on the
run's clock, one line per hand-over scheme the spec sweeps (``transport.handover``:
TCP/mm, Immediate Expiration, Bandwidth-Aware), the access link's capacity as the spec's
schedule sets it, the ideal of the paper's eq. 2 over the paper's averaging window
(`study.ideal_rate`) and, for the ``case*`` specs, the paper's throughput of each scheme
over that window (dashed, in the scheme's colour, "paper"); right, the sender's
congestion window per scheme with the hand-offs marked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.study_figures import (
    StudyFigure,
    axes,
    legend,
    no_data,
    rate_stairs,
    workload_series,
)
from analysis.study_tables import resolved_spec, run_table, top_flows
from experiments.p3_handover.handover import restarts
from experiments.p3_handover.study import capacity_steps, ideal_rate, paper_table, window

XLABEL = "time since the run's start (s)"
SCHEMES = {"none": ("TCP/mm", "tab:blue", "tcp-mm"),
           "immediate-expiration": ("Immediate Expiration", "tab:orange",
                                    "immediate-expiration"),
           "bandwidth-aware": ("Bandwidth-Aware", "tab:red", "bandwidth-aware")}
KEY = "param:transport.handover"


def _scheme_of(df: pd.DataFrame) -> pd.Series:
    """Each row's hand-over scheme (``none`` where the runs do not sweep it)."""
    if KEY in df:
        return df[KEY].astype(str)
    return pd.Series("none", index=df.index)


def figures(paper: dict[str, Any], out: Path) -> list[StudyFigure]:
    """P3's figures from the results in out (one folder per spec)."""
    figs = []
    for spec_dir in sorted(p for p in out.iterdir() if p.is_dir()
                           and (p.name.startswith("case") or p.name == "mptcp_handover")):
        spec = resolved_spec(spec_dir)
        if spec is not None:
            figs.append(_case(spec_dir, spec, paper_table(paper, spec_dir.name)))
    return figs


def _case(spec_dir: Path, spec: dict[str, Any], table: dict[str, Any]) -> StudyFigure:
    """Throughput with capacity, ideal and the paper's TCP/mm; cwnd; for one spec."""
    name = spec_dir.name
    fig, (left, right) = axes(f"{table.get('source', name)}: {name}", XLABEL, "",
                              ncols=2, sharey=False)
    left.set_ylabel("throughput (Mbit/s)")
    right.set_ylabel("cwnd (segments)")
    ts, flows = run_table(spec_dir, "timeseries"), run_table(spec_dir, "flows")
    workloads = sorted(top_flows(spec_dir)["workload"].dropna().unique()) if len(flows) else []
    series = workload_series(ts, flows, workloads)
    schemes = [k for k in SCHEMES if k in set(_scheme_of(flows))] if len(flows) else []
    runs_of = {k: set(flows.loc[_scheme_of(flows) == k, "run_id"]) for k in schemes}
    if series.empty:
        no_data(left, "no throughput series in these runs")
    else:
        for k in schemes:
            name_k, color, _row = SCHEMES[k]
            tag = f", {name_k}" if KEY in flows else ""
            rate_stairs(left, series[series["run_id"].isin(runs_of[k])],
                        f"ours{tag}: received (" + " + ".join(workloads) + ")",
                        color=color, lw=1.3)
    links = [p["name"] for p in spec["topology"]["paths"]]
    steps = capacity_steps(spec, links[0])
    t_end = float(left.get_xlim()[1]) if len(series) else 0.0
    for link, style in zip(links, ("-", "--", ":"), strict=False):
        link_steps = capacity_steps(spec, link)
        end = max(t_end, max(t for t, _ in link_steps) + 1.0)
        left.stairs([c / 1e6 for _, c in link_steps], [t for t, _ in link_steps] + [end],
                    color="0.55", ls=style, lw=1, label=f"capacity of {link} (spec)")
    left.set_yscale("symlog", linthresh=0.5)
    if len(steps) > 1:
        _t_h, t0, t1 = window(spec, table)
        if name.startswith("case"):  # one access link: eq. 2 over it
            ideal = ideal_rate(steps, t0, t1) / 1e6
            left.hlines(ideal, t0, t1, color="tab:green", ls="-.", lw=2,
                        label=f"ideal (eq. 2), {t0:g}-{t1:g} s: {ideal:.3g} Mbit/s")
        paper_tput = (table.get("values") or {}).get("throughput_mbps") or {}
        for k in schemes:
            name_k, color, row = SCHEMES[k]
            mine = series[series["run_id"].isin(runs_of[k])]
            if len(mine) and t1 > t0:
                inside = mine[(mine["t_rel"] >= t0 - 1e-9) & (mine["t_rel"] < t1 - 1e-9)]
                ours = (inside["rate_bps"] * inside["bin_s"]).sum() / (t1 - t0) / max(
                    mine["run_id"].nunique(), 1) / 1e6
                tag = f", {name_k}," if KEY in flows else ""
                left.hlines(ours, t0, t1, color=color, ls="--", lw=2,
                            label=f"ours{tag} over the window: {ours:.3g} Mbit/s")
            if paper_tput.get(row) is not None and name.startswith("case"):
                left.hlines(float(paper_tput[row]), t0, t1, color=color, ls=":", lw=2.5,
                            label=f"paper: {name_k} over the window, {paper_tput[row]} "
                                  "Mbit/s")
        for t, _c in steps[1:]:
            right.axvline(t, color="0.5", ls=":", lw=1)
    legend(left)
    _cwnd(right, run_table(spec_dir, "cwnd"))
    _estimates(right, spec_dir)
    caption = ("Left: what the receiver got, per hand-over scheme (mean over runs; log "
               "scale above 0.5 Mbit/s), the access link's capacity, the ideal over the "
               "paper's averaging window, and over that window our mean (dashed) and the "
               "paper's (dotted) throughput of each scheme.  Right: the sender's cwnd per "
               "scheme (ss samples); dotted: the schedule's changes; diamonds: the "
               "ssthresh Bandwidth-Aware set after each hand-off, from its packet-pair "
               "estimate (samples/handover-reno_bwa.jsonl).")
    if not name.startswith("case"):
        caption += ("  MPTCP over both links is our extra: the paper has no value for it, "
                    "and eq. 2 over one access link is not its ideal, so neither is drawn.")
    return StudyFigure(f"p3-{name}", f"{table.get('source', name)}: {name}", caption, fig)


def _cwnd(ax: Any, cwnd: pd.DataFrame) -> None:
    """cwnd per sender socket (one line each), or a note when the runs have none."""
    if cwnd.empty:
        no_data(ax, "no cwnd samples in these runs")
        return
    scheme = _scheme_of(cwnd)
    many = cwnd["run_id"].nunique() > len(set(scheme))
    for (run, port), g in cwnd.groupby(["run_id", "sport"]):
        g = g.sort_values("t_rel")
        name_k, color, _row = SCHEMES.get(str(scheme[g.index[0]]), ("", None, ""))
        label = (f"{name_k}, " if KEY in cwnd else "") + f"port {port}" + (
            f" ({run})" if many else "")
        ax.plot(g["t_rel"], pd.to_numeric(g["cwnd"], errors="coerce"), lw=1.1,
                drawstyle="steps-post", label=label,
                **({"color": color} if KEY in cwnd and color else {}))
    legend(ax)


def _estimates(ax: Any, spec_dir: Path) -> None:
    """Bandwidth-Aware's ssthresh at the moment it set it, one diamond per hand-off."""
    first = True
    for meta in sorted(spec_dir.glob("*/metadata.json")):
        run = meta.parent
        t0 = json.loads(meta.read_text()).get("t0")
        for rec in restarts(run):
            if rec.get("scheme") != "bandwidth-aware" or not rec.get("t_done") or t0 is None:
                continue
            label = None
            if first:
                label = (f"Bandwidth-Aware ssthresh {rec['ssthresh']} "
                         f"(BW {rec['bw_bps'] / 1e3:.0f} kbit/s, RTT "
                         f"{rec['rtt_us'] / 1e3:.0f} ms)")
                first = False
            ax.plot([rec["t_done"] - float(t0)], [rec["ssthresh"]], marker="D", ms=7,
                    color=SCHEMES["bandwidth-aware"][1], ls="none", label=label)
    if not first:
        legend(ax)
