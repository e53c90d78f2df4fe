"""P0's figures redrawn from our runs (Sect. 4.1-4.4), the paper's stated values overlaid.

Throughput is in the paper's KB/s (ifstat, 1 KB = 1024 bytes) on the run's clock.  The
paper states numbers only for Fig. 3 (60 and 170 KB/s after the video starts) and Fig. 4
(2 subflows are 70 KB/s faster than 1); Figs. 2 and 5 are curves, so those figures carry
no paper overlay and say so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.claims import paper_figure
from analysis.study_figures import (
    StudyFigure,
    axes,
    bars_with_ci,
    legend,
    mean_ci,
    no_data,
    paper_line,
    rate_stairs,
    top_level,
    workload_series,
)
from analysis.study_tables import resolved_spec, run_table, top_flows, workload_rates
from experiments.p0_wifi_3g.cc import ccs_in, disjoint_use, fairness_shares, file_rates
from testbed.core.units import parse_duration

KBPS = 1024 * 8  # the paper's "KB/s" in bit/s
SCALE = 1 / KBPS
YLABEL = "throughput (KB/s)"
XLABEL = "time since the run's start (s)"


def figures(paper: dict[str, Any], out: Path) -> list[StudyFigure]:
    """P0's figures from the results in out (one folder per spec)."""
    return [_paths(out), _heavy(paper, out), _subflows(paper, out), _outage(out),
            _cc_load(out), _cc_goals(out), _cc_windows(out)]


def _paths(out: Path) -> StudyFigure:
    """Fig. 2 / Fig. 6: TCP over each path and MPTCP over both, and MPTCP per path."""
    ts, flows = run_table(out / "paths", "timeseries"), run_table(out / "paths", "flows")
    fig, (left, right) = axes("Fig. 2: TCP per path vs MPTCP over both (paths)", XLABEL,
                              YLABEL, ncols=2)
    names = sorted(top_flows(out / "paths")["workload"].dropna().unique()) if len(flows) else []
    for w in names:
        rate_stairs(left, workload_series(ts, flows, [w]), w, scale=SCALE, lw=1.3)
    left.set_title("each workload (mean over its runs)", fontsize=9)
    mp = [w for w in names if w.startswith("mptcp")]
    rates = {w: sum(workload_rates(top_level(flows), w)) for w in mp}
    best = max(mp, key=lambda w: rates[w], default=None)
    right.set_title(f"{best or 'MPTCP'}: each path", fontsize=9)
    if best is not None:
        run_ids = set(flows.loc[flows["workload"] == best, "run_id"])
        per_path = ts[(ts["kind"] == "path") & ts["run_id"].isin(run_ids)]
        for path, g in per_path.groupby("key"):
            rate_stairs(right, g, f"{best} on {path}", scale=SCALE, lw=1.3)
        rate_stairs(right, workload_series(ts, flows, [best]), f"{best} total",
                    scale=SCALE, lw=1.8, color="black")
    if not names:
        no_data(left, "no complete runs of the paths spec")
    if best is None:
        no_data(right, "no MPTCP run")
    legend(left)
    legend(right)
    return StudyFigure("p0-fig2-paths", "Fig. 2 (Sect. 4.1): throughput per path and "
                       "for MPTCP", "Left: what each workload's receiver got (TCP pinned "
                       "to one path, MPTCP with each congestion control).  Right: the best "
                       "MPTCP workload split by path.  The paper shows curves only (no "
                       "numbers), so nothing is overlaid.", fig)


def _heavy(paper: dict[str, Any], out: Path) -> StudyFigure:
    """Fig. 3: file throughput over time, TCP vs MPTCP, the video starting on the WiFi."""
    ts, flows = (run_table(out / "heavy_load", "timeseries"),
                 run_table(out / "heavy_load", "flows"))
    values = paper_figure(paper, "fig3_heavy_load").get("values") or {}
    fig, (ax,) = axes("Fig. 3: file download while a video starts on the WiFi (heavy_load)",
                      XLABEL, YLABEL)
    colours = {"tcp-wifi": "tab:blue", "mptcp-cubic": "tab:orange"}
    for w, colour in colours.items():
        series = workload_series(ts, flows, [w])
        if series.empty:
            no_data(ax, f"no run of {w}", y=0.9 if w.startswith("tcp") else 0.8)
            continue
        rate_stairs(ax, series, f"ours: file, {w}", scale=SCALE, color=colour, lw=1.4)
        if w in values:
            ax.axhline(float(values[w]), color=colour, ls="--", lw=1.4,
                       label=f"paper: {w} after the video starts ({values[w]} KB/s)")
    video = workload_series(ts, flows, ["video"])
    if len(video):
        # the video runs in both runs; draw the first run's alone (mean would mix them)
        first = video[video["run_id"] == sorted(set(video["run_id"]))[0]]
        rate_stairs(ax, first, "ours: video (4 TCP flows on the WiFi)", scale=SCALE,
                    color="0.6", lw=1)
    start = _video_start(out / "heavy_load")
    if start is not None:
        ax.axvline(start, color="0.3", ls=":", lw=1, label=f"video starts ({start:g} s)")
    legend(ax)
    return StudyFigure("p0-fig3-heavy-load", "Fig. 3 (Sect. 4.2): heavy load",
                       "The file's throughput with TCP over the WiFi and with MPTCP while "
                       "four video flows start on the WiFi; dashed: the paper's stated "
                       "throughput after the video starts (same 4 Mbit/s paths).", fig)


def _video_start(spec_out: Path) -> float | None:
    """When the spec's video workload starts (s), None when unknown."""
    spec = resolved_spec(spec_out)
    for w in (spec or {}).get("workload", []):
        if w.get("name") == "video" and "start" in w:
            return parse_duration(w["start"])
    return None


def _subflows(paper: dict[str, Any], out: Path) -> StudyFigure:
    """Fig. 4: one vs two subflows over the WiFi, and where the paper's gain would put 2."""
    spec_out = out / "subflows"
    ts, flows = run_table(spec_out, "timeseries"), run_table(spec_out, "flows")
    key = "param:transport.subflows_per_path"
    gain = (paper_figure(paper, "fig4_subflows").get("values") or {}).get("gain_2_over_1")
    fig, (ax,) = axes("Fig. 4: one vs two subflows over the WiFi (subflows)", XLABEL,
                      YLABEL)
    one = []
    for n, colour in ((1, "tab:blue"), (2, "tab:orange")):
        runs = (sorted(set(flows.loc[flows[key].astype(str) == str(n), "run_id"]))
                if key in flows else [])
        series = workload_series(ts, flows, ["file"], runs)
        if series.empty:
            no_data(ax, f"no run with {n} subflow(s)", y=0.9 - 0.1 * n)
            continue
        rate_stairs(ax, series, f"ours: {n} subflow(s) per path", scale=SCALE,
                    color=colour, lw=1.4)
        sel = top_level(flows[flows["run_id"].isin(runs)])
        mean, _half = mean_ci([r / KBPS for r in workload_rates(sel, "file")])
        ax.axhline(mean, color=colour, ls=":", lw=1, label=f"ours: {n} mean {mean:.0f} KB/s")
        if n == 1:
            one.append(mean)
    if gain is not None and one:
        paper_line(ax, one[0] + float(gain),
                   f"1-subflow mean + the paper's {gain} KB/s gain")
    legend(ax)
    return StudyFigure("p0-fig4-subflows", "Fig. 4 (Sect. 4.3): subflows",
                       "The file's throughput with one and two subflows on the WiFi (one "
                       "competing TCP flow shares it).  The paper states only the gain, "
                       "so its dashed line sits that gain above our one-subflow mean.", fig)


def _outage(out: Path) -> StudyFigure:
    """Fig. 5: TCP (with a reconnect over 3G) vs MPTCP around the WiFi outage."""
    spec_out = out / "outage"
    ts, flows = run_table(spec_out, "timeseries"), run_table(spec_out, "flows")
    fig, (ax,) = axes("Fig. 5: the WiFi goes down (outage)", XLABEL, YLABEL)
    top = top_level(flows)
    groups = {"TCP (tcp-wifi, then tcp-cell-reconnect)": ["tcp-wifi", "tcp-cell-reconnect"],
              "MPTCP": ["mptcp"]}
    for (label, names), colour in zip(groups.items(), ("tab:blue", "tab:orange"),
                                      strict=True):
        runs = sorted(set(top.loc[top["workload"].isin(names), "run_id"])) if len(top) else []
        series = workload_series(ts, flows, names, runs)
        if series.empty:
            no_data(ax, f"no run of {label}", y=0.9 if colour == "tab:blue" else 0.8)
            continue
        rate_stairs(ax, series, f"ours: {label}", scale=SCALE, color=colour, lw=1.4)
    down = _down_at(spec_out)
    if down is not None:
        ax.axvspan(down, ax.get_xlim()[1], color="0.85", zorder=0,
                   label=f"WiFi down from {down:g} s")
    legend(ax)
    return StudyFigure("p0-fig5-outage", "Fig. 5 (Sect. 4.4): the outage",
                       "What the receiver got while the WiFi went down: TCP stalls until "
                       "the application reconnects over 3G, MPTCP keeps using 3G.  The "
                       "paper shows curves only (no numbers), so nothing is overlaid.", fig)


def _down_at(spec_out: Path) -> float | None:
    """When the spec's schedule takes a link down (s), None when it does not."""
    spec = resolved_spec(spec_out)
    downs = [parse_duration(e["at"]) for e in (spec or {}).get("schedule", [])
             if e.get("down") or e.get("up") is False]
    return min(downs) if downs else None



def _cc_load(out: Path) -> StudyFigure:
    """Figs. 6-7: the file's throughput per congestion control, normal and heavy load."""
    fig, axs = axes("Figs. 6-7: MPTCP congestion controls over WiFi + 3G (cc_normal, "
                    "cc_heavy)", "congestion control", "file throughput (Mbit/s)", ncols=2)
    for ax, (spec, title) in zip(axs, (("cc_normal", "normal load"),
                                       ("cc_heavy", "heavy load: after the video starts")),
                                 strict=True):
        rates = file_rates(out, spec)
        ax.set_title(title, fontsize=9)
        if not rates:
            no_data(ax, f"no complete runs of {spec}")
            continue
        names = ccs_in(rates)
        bars_with_ci(ax, names, [[r / 1e6 for r in rates[c]] for c in names],
                     color="tab:orange")
    return StudyFigure("p0-fig6-7-cc", "Figs. 6-7 (Sect. 4.5-4.6): coupled congestion "
                       "controls", "Mean throughput of the MPTCP file transfer per "
                       "congestion control (LIA, OLIA, BALIA, wVegas: the testbed's BPF "
                       "programs; cubic: uncoupled subflows), 95 % interval over the "
                       "repetitions where there are several.  The paper shows curves only "
                       "(LIA best at normal load, BALIA under heavy load), so nothing is "
                       "overlaid.", fig)


def _cc_goals(out: Path) -> StudyFigure:
    """RFC 6356's two goals: fair at a shared bottleneck, still using disjoint paths."""
    fig, (left, right) = axes("Coupling: a shared bottleneck and disjoint paths "
                              "(cc_fairness, cc_disjoint)", "congestion control", "%",
                              ncols=2, sharey=False)
    shares = fairness_shares(out)
    left.set_title("MPTCP's share of a link shared with one TCP flow", fontsize=9)
    if shares:
        names = ccs_in(shares)
        bars_with_ci(left, names, [[100 * x for x in shares[c]] for c in names],
                     color="tab:orange")
        left.axhline(50, color="black", lw=1, label="fair share (50 %)")
        left.axhline(58, color="tab:green", ls="--", lw=1, label="coupled: at most 58 %")
        left.axhline(62, color="tab:red", ls="--", lw=1, label="uncoupled: at least 62 %")
        left.set_ylim(0, 100)
        legend(left)
    else:
        no_data(left, "no complete runs of cc_fairness")
    use = disjoint_use(out)
    right.set_title("throughput over two disjoint 5 Mbit/s paths", fontsize=9)
    if use:
        names = ccs_in(use)
        bars_with_ci(right, names, [[100 * x for x in use[c]] for c in names],
                     color="tab:orange")
        right.axhline(85, color="tab:green", ls="--", lw=1, label="goal: at least 85 %")
        right.set_ylim(0, 110)
        legend(right)
    else:
        no_data(right, "no complete runs of cc_disjoint")
    return StudyFigure("p0-cc-goals", "Coupling at a shared bottleneck and over disjoint "
                       "paths", "Left: the share of the link the 2-subflow MPTCP "
                       "connection got next to one TCP reno flow (coupled controls should "
                       "stay near 50 %; uncoupled reno subflows take about two thirds).  "
                       "Right: the connection's throughput over the sum of two disjoint "
                       "paths.  Not in the paper: RFC 6356's design goals.", fig)


def _cc_windows(out: Path) -> StudyFigure:
    """Per-subflow windows in one shared-bottleneck run of LIA and of uncoupled reno."""
    spec_out = out / "cc_fairness"
    cwnd = run_table(spec_out, "cwnd")
    key = "param:transport.cc"
    fig, axs = axes("Windows at a shared link: LIA vs uncoupled reno (cc_fairness)", XLABEL,
                    "cwnd (segments)", ncols=2)
    for ax, cc in zip(axs, ("lia", "reno"), strict=True):
        ax.set_title(f"{cc} subflows and the TCP reno flow (first run)", fontsize=9)
        sel = cwnd[cwnd[key].astype(str) == cc] if key in cwnd else cwnd.iloc[0:0]
        if sel.empty:
            no_data(ax, f"no cwnd samples of a {cc} run")
            continue
        run = sorted(sel["run_id"].unique())[0]
        sel = sel[(sel["run_id"] == run) & (sel["host"] == "client")]
        n = 0
        for (proto, _port), g in sel.groupby(["protocol", "sport"]):
            n += proto != "tcp"
            label = "TCP reno flow" if proto == "tcp" else f"MPTCP subflow {n}"
            ax.plot(g["t_rel"], g["cwnd"], lw=1.2, label=label,
                    color="0.4" if proto == "tcp" else None)
        legend(ax)
    return StudyFigure("p0-cc-windows", "Coupling in the windows",
                       "The sender's congestion windows sampled with ss: with LIA the two "
                       "subflows together hold about what the TCP flow holds; with "
                       "uncoupled reno each subflow holds about as much as the TCP flow.",
                       fig)
