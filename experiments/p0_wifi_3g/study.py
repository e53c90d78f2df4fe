"""P0's claims and tables: MPTCP over WiFi + 3G against the best single path.

Which number answers which claim (README.md says why): MPTCP over WiFi+3G vs the best
single path (``paths``); file throughput with the WiFi video running, TCP vs MPTCP
(``heavy_load``); 2 vs 1 subflows (``subflows``); delivery during the WiFi outage, TCP vs
MPTCP (``outage``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.claims import Claim, Comparison, StudyResult, measured, paper_figure
from analysis.study_tables import resolved_spec, run_table, top_flows, window_rate, workload_rate
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
    best_tcp = max((r for w, r in rates.items() if w.startswith("tcp") and r), default=None)
    best_mptcp = max((r for w, r in rates.items() if w.startswith("mptcp") and r),
                     default=None)
    res.claims.append(Claim(
        "Fig. 2", "MPTCP over WiFi + 3G beats the best single path",
        None if best_tcp is None or best_mptcp is None else best_mptcp > best_tcp,
        measured({"best_tcp_mbit": best_tcp and best_tcp / 1e6,
                  "best_mptcp_mbit": best_mptcp and best_mptcp / 1e6})))
    fig3 = paper_figure(paper, "fig3_heavy_load")
    heavy = top_flows(out / "heavy_load")
    for w, paper_kbs in (fig3.get("values") or {}).items():
        r = workload_rate(heavy, w)
        res.comparisons.append(Comparison("Fig. 3", f"file throughput with video, {w}",
                                          float(paper_kbs), None if r is None else r / KBPS,
                                          "KB/s", "ours: the whole run, scaled links"))
    tcp_h, mp_h = workload_rate(heavy, "tcp-wifi"), workload_rate(heavy, "mptcp-cubic")
    res.claims.append(Claim("Fig. 3", "under heavy load MPTCP's file throughput exceeds TCP's",
                            None if tcp_h is None or mp_h is None else mp_h > tcp_h,
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
                            None if gain is None else gain > 0,
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
    during: dict[str, float | None] = {}
    for v in variants:
        label = "mptcp" if '"mptcp"' in v else "tcp"
        during[label] = window_rate(out / "outage", t_down + 0.5, t_up, run_filter={key: v})
    res.claims.append(Claim(
        "Fig. 5", "during the WiFi outage MPTCP keeps delivering data; TCP stalls "
        "until the application reconnects",
        None if during.get("mptcp") is None else bool(
            during["mptcp"] > 0 and (during.get("tcp") or 0) < during["mptcp"]),
        measured({f"{k}_kbit_during_outage": v and v / 1e3 for k, v in during.items()})))
