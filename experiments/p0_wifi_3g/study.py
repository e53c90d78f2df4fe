"""P0's claims and tables: MPTCP over WiFi + 3G against the best single path.

Which number answers which claim (README.md says why): MPTCP over WiFi+3G vs the best
single path (``paths``); file throughput with the WiFi video running, TCP vs MPTCP
(``heavy_load``); 2 vs 1 subflows (``subflows``); delivery during the WiFi outage, TCP vs
MPTCP (``outage``).

Every claim here compares two groups of runs, so each rests on one `difference` (one
value per run and side, Welch's 95 % interval over the repetitions; analysis.evidence).
Fig. 2: the best MPTCP workload against the best TCP one (each picked by its mean).
Fig. 5: MPTCP's mean rate over the outage against TCP's; it says nothing about gaps
inside the outage (the figure shows them; a 1 s stall does not change the verdict).
The quick specs repeat every point 3 times, so each claim is decided by its 95 % interval
(on one repetition, as a full spec may run, by the one-repetition rule: the gap must be
>= 10 %) -- see README.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from analysis.claims import Claim, Comparison, StudyResult, measured, paper_figure
from analysis.evidence import difference
from analysis.study_tables import (
    resolved_spec,
    run_table,
    top_flows,
    window_rates,
    workload_rate,
    workload_rates,
)
from testbed.core.units import parse_duration

KBPS = 1024 * 8  # the paper's "KB/s" (ifstat) in bit/s


def evaluate(paper: dict[str, Any], out: Path, res: StudyResult) -> None:
    """Fill res from the results of ``testbed study`` in out (one folder per spec)."""
    flows = top_flows(out / "paths")
    rates = {w: workload_rate(flows, w) for w in
             ("tcp-wifi", "tcp-cell", "mptcp-reno", "mptcp-cubic", "mptcp-bbr")}
    for w, r in rates.items():
        res.comparisons.append(Comparison("Fig. 2 / Fig. 6", f"throughput {w}", None,
                                          None if r is None else r / 1e6, "Mbit/s",
                                          "paper shows curves only"))
    best_tcp = max((w for w, r in rates.items() if w.startswith("tcp") and r),
                   key=lambda w: rates[w] or 0, default=None)
    best_mp = max((w for w, r in rates.items() if w.startswith("mptcp") and r),
                  key=lambda w: rates[w] or 0, default=None)
    res.claims.append(Claim(
        "Fig. 2", "MPTCP over WiFi + 3G beats the best single path",
        [difference(f"best MPTCP ({best_mp}) - best TCP ({best_tcp}), Mbit/s",
                    _mbit(flows, best_tcp), _mbit(flows, best_mp))],
        measured({"best_tcp_mbit": best_tcp and rates[best_tcp] and rates[best_tcp] / 1e6,
                  "best_mptcp_mbit": best_mp and rates[best_mp] and rates[best_mp] / 1e6})))
    fig3 = paper_figure(paper, "fig3_heavy_load")
    heavy = top_flows(out / "heavy_load")
    for w, paper_kbs in (fig3.get("values") or {}).items():
        r = workload_rate(heavy, w)
        res.comparisons.append(Comparison("Fig. 3", f"file throughput with video, {w}",
                                          float(paper_kbs), None if r is None else r / KBPS,
                                          "KB/s", "ours: the whole run, scaled links"))
    tcp_h, mp_h = workload_rate(heavy, "tcp-wifi"), workload_rate(heavy, "mptcp-cubic")
    res.claims.append(Claim("Fig. 3", "under heavy load MPTCP's file throughput exceeds TCP's",
                            [difference("MPTCP - TCP file throughput, KB/s",
                                        _kbs(heavy, "tcp-wifi"), _kbs(heavy, "mptcp-cubic"))],
                            measured({"tcp_kBps": tcp_h and tcp_h / KBPS,
                                      "mptcp_kBps": mp_h and mp_h / KBPS})))
    sub = top_flows(out / "subflows")
    key = "param:transport.subflows_per_path"
    one = workload_rate(sub, "file", {key: 1})
    two = workload_rate(sub, "file", {key: 2})
    gain = None if one is None or two is None else (two - one) / KBPS
    paper_gain = (paper_figure(paper, "fig4_subflows").get("values") or {}).get("gain_2_over_1")
    res.comparisons.append(Comparison("Fig. 4", "gain of 2 subflows over 1", paper_gain, gain,
                                      "KB/s"))
    res.claims.append(Claim("Fig. 4", "two subflows over one interface are faster than one",
                            [difference("two - one subflow, KB/s", _kbs(sub, "file", {key: 1}),
                                        _kbs(sub, "file", {key: 2}))],
                            measured({"one_kBps": one and one / KBPS,
                                      "two_kBps": two and two / KBPS})))
    _outage(out, res)


def _outage(out: Path, res: StudyResult) -> None:
    """Fig. 5: what TCP and MPTCP deliver while the WiFi is down (``outage``)."""
    spec = resolved_spec(out / "outage")
    if spec is None:
        return
    downs = [parse_duration(e["at"]) for e in spec.get("schedule", [])
             if e.get("down") or e.get("up") is False]
    ups = [parse_duration(e["at"]) for e in spec.get("schedule", [])
           if e.get("down") is False or e.get("up")]
    t_down = downs[0] if downs else None
    t_up = ups[0] if ups else parse_duration(spec["duration"])
    if t_down is None:
        return
    key = "param:workload"
    ts = run_table(out / "outage", "timeseries")
    variants = sorted(ts[key].unique()) if key in ts else []
    during: dict[str, list[float]] = {}
    for v in variants:
        label = "mptcp" if '"mptcp"' in v else "tcp"
        during[label] = [r / 1e3 for r in window_rates(out / "outage", t_down + 0.5, t_up,
                                                        run_filter={key: v}, table=ts)]
    res.claims.append(Claim(
        "Fig. 5", "during the WiFi outage MPTCP delivers more than TCP, which stalls "
        "until the application reconnects (mean rate over the outage)",
        [difference("MPTCP - TCP delivered during the outage, kbit/s",
                    during.get("tcp", []), during.get("mptcp", []))],
        measured({f"{k}_kbit_s_during_outage": sum(v) / len(v) if v else None
                  for k, v in during.items()})))


def _kbs(flows: pd.DataFrame, workload: str, run_filter: dict[str, Any] | None = None
         ) -> list[float]:
    """One workload's throughput in the paper's KB/s, one value per run."""
    return [r / KBPS for r in workload_rates(flows, workload, run_filter)]


def _mbit(flows: pd.DataFrame, workload: str | None) -> list[float]:
    """One workload's throughput in Mbit/s, one value per run ([] for None)."""
    return [] if workload is None else [r / 1e6 for r in workload_rates(flows, workload)]
