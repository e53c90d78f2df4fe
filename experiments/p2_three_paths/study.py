"""P2's claims and tables: MPTCP over three paths in Mininet.

Which number answers which claim (README.md says why): MPTCP goodput per bandwidth
configuration (``bandwidth``) and congestion control (``cc``, ``loss``); the ping table
under 10 % loss (``loss``).

The one claim ("10 % loss per direction shows as ping loss well above zero": above 5 %)
is a share of independent trials, not a difference between runs: netem drops each packet
independently, so every ping is a Bernoulli trial and the pings of all runs are pooled
into a `proportion` with Wilson's 95 % interval (analysis.evidence).  One run of quick's
200 pings decides it unless 16 or fewer are lost (about one run in 90 000 at the expected
19 %; at 100 pings 9 or fewer, about one in 200); n reports the runs the pings came from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from analysis.claims import Claim, Comparison, StudyResult, StudyTable, measured, paper_figure
from analysis.evidence import proportion
from analysis.study_tables import numeric, resolved_spec, run_table, top_flows, workload_rate


def evaluate(paper: dict[str, Any], out: Path, res: StudyResult) -> None:
    """Fill res from the results of ``testbed study`` in out (one folder per spec)."""
    for spec_name, key in (("bandwidth", "param:topology.paths.1.bw"),
                           ("cc", "param:transport.cc"), ("loss", "param:transport.cc")):
        flows = top_flows(out / spec_name)
        if flows.empty:
            res.missing.append(spec_name)
            continue
        # a spec without this sweep (loss, quick: cubic only) gives one value
        values = sorted(flows[key].astype(str).unique()) if key in flows else [None]
        for value in values:
            r = workload_rate(flows, "transfer", None if value is None else {key: value})
            label = "as specified" if value is None else f"{key[6:]}={value}"
            res.comparisons.append(Comparison(spec_name, f"MPTCP goodput, {label}",
                                              None, None if r is None else r / 1e6, "Mbit/s"))
    ping = run_table(out / "loss", "ping")
    if not ping.empty:
        lost = ping["lost"].astype(bool)
        stats = _ping_stats(ping)
        by_cc = _ping_by_cc(out / "loss", ping)
        paper_ping = paper_figure(paper, "table_ping").get("values") or {}
        for cc, st in by_cc.items():
            for k, v in st.items():
                ref = (paper_ping.get(cc) or {}).get(k)
                res.comparisons.append(Comparison("ping table", f"{k}, {cc}",
                                                  None if ref is None else float(ref), v, ""))
        per_run = ping.groupby("run_id").size()
        res.tables.append(ping_table(paper_figure(paper, "table_ping"), by_cc,
                                     sorted({int(n) for n in per_run})))
        res.claims.append(Claim(
            "ping table", "10 % loss per direction shows as ping loss well above zero",
            [proportion("pings lost, % (line: 5 %)", int(lost.sum()), len(ping),
                        ping["run_id"].nunique(), 5.0, above=True)],
            measured(stats), specs=("loss",)))


def _ping_stats(ping: pd.DataFrame) -> dict[str, float]:
    """The paper's ping statistics of some pings (one or more runs)."""
    rtt = numeric(ping["rtt_ms"])
    lost = ping["lost"].astype(bool)
    return {"transmitted": float(len(ping)), "received": float((~lost).sum()),
            "loss_pct": float(100 * lost.mean()), "rtt_min_ms": float(rtt.min()),
            "rtt_avg_ms": float(rtt.mean()), "rtt_max_ms": float(rtt.max()),
            "rtt_mdev_ms": float(rtt.std(ddof=0))}


def _ping_by_cc(spec_out: Path, ping: pd.DataFrame) -> dict[str, dict[str, float]]:
    """The ping statistics per congestion control (the spec's one cc when not swept)."""
    key = "param:transport.cc"
    if key in ping:
        return {str(cc): _ping_stats(g) for cc, g in ping.groupby(key)}
    spec = resolved_spec(spec_out) or {}
    return {str(spec.get("transport", {}).get("cc", "as specified")): _ping_stats(ping)}


def ping_table(fig: dict[str, Any], ours: dict[str, dict[str, float]],
               per_run: list[int]) -> StudyTable:
    """The paper's ping table (a row per statistic, a column per cc), ours beside it.

    fig: paper.toml's ``[figures.table_ping]``; ours: statistics per cc (`_ping_by_cc`);
    per_run: the numbers of pings the runs sent (for the table's note).
    A cc we did not run, or a statistic we do not measure, shows "not run" / "—".
    """
    labels = fig.get("labels") or {}
    paper = fig.get("values") or {}
    ccs = sorted(set(paper) | set(ours))
    rows = []
    for k, label in labels.items():
        row = [str(label)]
        for cc in ccs:
            ref = (paper.get(cc) or {}).get(k)
            row.append("—" if ref is None else f"{ref:g}")
        for cc in ccs:
            if cc not in ours:
                row.append("not run")
                continue
            v = ours[cc].get(k)
            row.append("—" if v is None else f"{v:.4g}")
        rows.append(row)
    columns = (["", *(f"paper, {cc}" for cc in ccs), *(f"ours, {cc}" for cc in ccs)])
    return StudyTable("Ping test under 10 % loss, laid out as the paper's table", columns,
                      rows, "Ours: the pings of the loss spec's runs ("
                      f"{' or '.join(map(str, per_run))} per run), per "
                      "congestion control; transmission time is not measured (—).")
