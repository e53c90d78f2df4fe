"""P2's claims and tables: MPTCP over three paths in Mininet.

Which number answers which claim (README.md says why): MPTCP goodput per bandwidth
configuration (``bandwidth``) and congestion control (``cc``, ``loss``); the ping table
under 10 % loss (``loss``).

The one claim ("10 % loss per direction shows as ping loss well above zero": above 5 %)
is a share of independent trials, not a difference between runs: netem drops each packet
independently, so every ping is a Bernoulli trial and the pings of all runs are pooled
into a `proportion` with Wilson's 95 % interval (analysis.evidence).  One run of 100
pings already decides it when its share of lost pings is well away from 5 % (13 % lost
gives 7.8-21 %); n reports the runs the pings came from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.claims import Claim, Comparison, StudyResult, measured
from analysis.evidence import proportion
from analysis.study_tables import numeric, run_table, top_flows, workload_rate


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
        rtt = numeric(ping["rtt_ms"])
        lost = ping["lost"].astype(bool)
        stats = {"transmitted": float(len(ping)), "received": float((~lost).sum()),
                  "loss_pct": float(100 * lost.mean()), "rtt_min_ms": float(rtt.min()),
                  "rtt_avg_ms": float(rtt.mean()), "rtt_max_ms": float(rtt.max()),
                  "rtt_mdev_ms": float(rtt.std(ddof=0))}
        for k, v in stats.items():
            res.comparisons.append(Comparison("ping table", k, None, v, ""))
        res.claims.append(Claim(
            "ping table", "10 % loss per direction shows as ping loss well above zero",
            [proportion("pings lost, % (line: 5 %)", int(lost.sum()), len(ping),
                        ping["run_id"].nunique(), 5.0, above=True)],
            measured(stats)))
