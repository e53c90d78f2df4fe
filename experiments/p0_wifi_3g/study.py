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
from analysis.evidence import difference, level
from analysis.study_tables import (
    resolved_spec,
    run_table,
    top_flows,
    window_rates,
    workload_rate,
    workload_rates,
)
from experiments.p0_wifi_3g.cc import (
    COUPLED,
    after_video,
    ccs_in,
    disjoint_use,
    fairness_shares,
    file_rates,
    workload_window_rates,
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
                  "best_mptcp_mbit": best_mp and rates[best_mp] and rates[best_mp] / 1e6}),
        specs=("paths",)))
    fig3 = paper_figure(paper, "fig3_heavy_load")
    window = after_video(out / "heavy_load")
    heavy: dict[str, list[float]] = {}  # workload -> KB/s per run, while the video runs
    if window is not None:
        heavy = {w: [r / KBPS for r in workload_window_rates(out / "heavy_load", w, window)]
                 for w in {*(fig3.get("values") or {}), "tcp-wifi", "mptcp-cubic"}}
    note = ("ours: from 1 s after the video starts to the end" if window is None else
            f"ours: {window[0]:g}-{window[1]:g} s, 1 s after the video starts to the end")
    for w, paper_kbs in (fig3.get("values") or {}).items():
        r = _mean(heavy.get(w, []))
        res.comparisons.append(Comparison("Fig. 3", f"file throughput with video, {w}",
                                          float(paper_kbs), r, "KB/s", note))
    tcp_h, mp_h = heavy.get("tcp-wifi", []), heavy.get("mptcp-cubic", [])
    res.claims.append(Claim("Fig. 3", "under heavy load MPTCP's file throughput exceeds TCP's",
                            [difference("MPTCP - TCP file throughput while the video runs, "
                                        "KB/s", tcp_h, mp_h)],
                            measured({"tcp_kBps": _mean(tcp_h), "mptcp_kBps": _mean(mp_h)}),
                            specs=("heavy_load",)))
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
                                      "two_kBps": two and two / KBPS}),
                            specs=("subflows",)))
    _outage(out, res)
    _congestion_control(out, res)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _best_other(rates: dict[str, list[float]], than: str, among: tuple[str, ...] = COUPLED
                ) -> str | None:
    """The control with the highest mean rate among `among` other than `than`."""
    others = [c for c in among if c != than and rates.get(c)]
    return max(others, key=lambda c: _mean(rates[c]) or 0.0, default=None)


def _congestion_control(out: Path, res: StudyResult) -> None:
    """Figs. 6-7 (the coupled controls at normal and heavy load) and RFC 6356's goals:
    at a shared bottleneck a coupled connection takes no more than a TCP flow; over
    disjoint paths it still uses them (``cc_*`` specs, experiments/p0_wifi_3g/cc.py)."""
    loads = {"Fig. 6": ("normal load", file_rates(out, "cc_normal")),
             "Fig. 7": ("heavy load, after the video starts", file_rates(out, "cc_heavy"))}
    spec_of = {"Fig. 6": "cc_normal", "Fig. 7": "cc_heavy"}
    for fig, (label, rates) in loads.items():
        for cc in ccs_in(rates):
            m = _mean(rates[cc])
            res.comparisons.append(Comparison(fig, f"file throughput, {label}, {cc}", None,
                                              None if m is None else m / 1e6, "Mbit/s",
                                              "paper shows curves only"))

    def mbit(rates: dict[str, list[float]], cc: str | None) -> list[float]:
        return [r / 1e6 for r in rates.get(cc or "", [])]

    def ordering(fig: str, text: str, rates: dict[str, list[float]], winner: str,
                 among: tuple[str, ...] = COUPLED) -> None:
        other = _best_other(rates, winner, among)
        res.claims.append(Claim(fig, text, [difference(
            f"{winner} - best of the others ({other}), Mbit/s", mbit(rates, other),
            mbit(rates, winner))], measured({f"{cc}_mbit": _mean(mbit(rates, cc))
                                            for cc in ccs_in(rates)}),
            specs=(spec_of[fig],)))

    normal, heavy = loads["Fig. 6"][1], loads["Fig. 7"][1]
    if normal:
        ordering("Fig. 6", "at normal load LIA has the best throughput of the coupled "
                 "controls", normal, "lia")
    if heavy:
        ordering("Fig. 7", "under heavy load BALIA has the best throughput of the coupled "
                 "controls", heavy, "balia")
        ordering("Fig. 7", "under heavy load wVegas does better than LIA and OLIA", heavy,
                 "wvegas", ("lia", "olia", "wvegas"))
    shares = fairness_shares(out)
    for cc in ccs_in(shares):
        m = _mean(shares[cc])
        res.comparisons.append(Comparison(
            "RFC 6356", f"MPTCP share of a shared 10 Mbit/s link against one TCP flow, {cc}",
            None, None if m is None else 100 * m, "%", "fair share 50 %"))
    for cc in ("lia", "olia"):
        if cc in shares:
            res.claims.append(Claim(
                "RFC 6356", f"{cc.upper()}: a 2-subflow MPTCP connection takes at most 58 % "
                "of a link it shares with one TCP flow", [level(
                    f"{cc} MPTCP share of the link, %", [100 * x for x in shares[cc]], 58.0,
                    above=False)], measured({"share_pct": 100 * (_mean(shares[cc]) or 0)}),
                specs=("cc_fairness",)))
    if "reno" in shares:
        res.claims.append(Claim(
            "RFC 6356", "uncoupled reno subflows: a 2-subflow MPTCP connection takes at "
            "least 62 % of a link it shares with one TCP flow", [level(
                "reno MPTCP share of the link, %", [100 * x for x in shares["reno"]], 62.0,
                above=True)], measured({"share_pct": 100 * (_mean(shares["reno"]) or 0)}),
            specs=("cc_fairness",)))
    use = disjoint_use(out)
    for cc in ccs_in(use):
        m = _mean(use[cc])
        res.comparisons.append(Comparison(
            "RFC 6356", f"MPTCP throughput over two disjoint 5 Mbit/s paths, {cc}", None,
            None if m is None else 100 * m, "% of 10 Mbit/s", "goal: at least 85 %"))


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
                  for k, v in during.items()}), specs=("outage",)))


def _mean(values: list[float]) -> float | None:
    """The mean of values (None for none)."""
    return sum(values) / len(values) if values else None


def _kbs(flows: pd.DataFrame, workload: str, run_filter: dict[str, Any] | None = None
         ) -> list[float]:
    """One workload's throughput in the paper's KB/s, one value per run."""
    return [r / KBPS for r in workload_rates(flows, workload, run_filter)]


def _mbit(flows: pd.DataFrame, workload: str | None) -> list[float]:
    """One workload's throughput in Mbit/s, one value per run ([] for None)."""
    return [] if workload is None else [r / 1e6 for r in workload_rates(flows, workload)]
