"""The sweep report: bars for categorical parameters, lines for numeric ones, Student t
95 % intervals over repetitions, missing values left out, value names in every cell."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection, PolyCollection
from matplotlib.container import BarContainer, ErrorbarContainer
from realruns import MPTCP_RUN, TCP_RUN, analysed_copy

from analysis import plots, report, sweep_stats
from analysis.bundle import headline
from analysis.evidence import mean_interval
from analysis.report_sweep import means_table, runs_table
from testbed.results.summary import write_summary

T_975_DF2 = 4.302652729911275  # Student t, 97.5 % quantile, 2 degrees of freedom (tables)
T_975_DF1 = 12.706204736174705
CUBIC = json.dumps({"kind": "bulk", "name": "mptcp-cubic", "protocol": "mptcp"})
WIFI = json.dumps({"kind": "bulk", "name": "tcp-wifi", "protocol": "tcp", "via": "wifi"})


def _runs() -> pd.DataFrame:
    """Two workloads (JSON tables, as summary.parquet holds them) x two bandwidths x three
    repetitions; throughput in bit/s."""
    rows = []
    for wl, base in ((CUBIC, 8e6), (WIFI, 4e6)):
        for bw, f in (("2.5Mbit", 0.5), ("5Mbit", 1.0)):
            for rep, d in ((1, -1e6), (2, 0.0), (3, 1e6)):
                rows.append({"run_id": f"{len(rows)}", "status": "complete", "fidelity": "ok",
                             "repetition": rep, "workload.0": wl, "topology.paths.1.bw": bw,
                             "throughput_bps_mean": base * f + d, "fct_s_median": 1.0 + rep})
    return pd.DataFrame(rows)


def _bars(ax) -> list:
    return [p for c in ax.containers if isinstance(c, BarContainer) for p in c.patches]


def test_categorical_parameters_are_bars_numeric_ones_lines():
    s = _runs().assign(**{"transport.subflows_per_path": [1, 2] * 6,
                          "transport.rmem": ["64KiB", "8MiB"] * 6,
                          "flag": [True, False] * 6, "controller.kind": ["ecmp", "spray"] * 6})
    kinds = {p: sweep_stats.param_axis(s, p).categorical for p in
             ("workload.0", "topology.paths.1.bw", "transport.subflows_per_path",
              "transport.rmem", "flag", "controller.kind")}
    assert kinds == {"workload.0": True, "topology.paths.1.bw": False,
                     "transport.subflows_per_path": False, "transport.rmem": False,
                     "flag": True, "controller.kind": True}
    rate = sweep_stats.param_axis(s, "topology.paths.1.bw")
    assert rate.order == ["2.5Mbit", "5Mbit"] and rate.position["5Mbit"] == 5e6
    assert sweep_stats.param_axis(s, "transport.rmem").log  # 64 KiB .. 8 MiB

    bars = plots.sweep_figure(s, "workload.0", "throughput_bps_mean", ["topology.paths.1.bw"])
    ax = bars.axes[0]
    assert len(_bars(ax)) == 4  # 2 workloads x 2 bandwidths
    assert [t.get_text() for t in ax.get_xticklabels()] == ["mptcp-cubic", "tcp-wifi"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["2.5Mbit", "5Mbit"]
    assert ax.get_ylabel() == "throughput (Mbit/s)" and ax.get_xlabel() == "workload.0"
    assert not [line for line in ax.lines if len(line.get_xdata()) > 1]

    lines = plots.sweep_figure(s, "topology.paths.1.bw", "throughput_bps_mean",
                               ["workload.0"])
    ax = lines.axes[0]
    assert not _bars(ax)
    drawn = [line for line in ax.lines if len(line.get_xdata()) == 2]
    assert [list(line.get_xdata()) for line in drawn] == [[2.5e6, 5e6]] * 2
    assert sum(isinstance(c, PolyCollection) for c in ax.collections) == 2  # the bands
    assert ax.get_xlabel() == "topology.paths.1.bw (rate)"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2.5Mbit", "5Mbit"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["mptcp-cubic", "tcp-wifi"]


def test_intervals_are_student_t_over_the_repetitions():
    s = _runs()
    st = sweep_stats.group_stats(s, "throughput_bps_mean", ["workload.0", "topology.paths.1.bw"])
    row = st[(st["workload.0"] == CUBIC) & (st["topology.paths.1.bw"] == "5Mbit")].iloc[0]
    # values 7e6, 8e6, 9e6: mean 8e6, s = 1e6, half width t(0.975, 2) * s / sqrt(3)
    half = T_975_DF2 * 1e6 / math.sqrt(3)
    assert row["n"] == 3 and row["mean"] == pytest.approx(8e6)
    assert (row["low"], row["high"]) == pytest.approx((8e6 - half, 8e6 + half), rel=1e-9)
    assert mean_interval([1.0, 3.0]) == pytest.approx((2.0, 2.0 - T_975_DF1 * 1.0,
                                                       2.0 + T_975_DF1 * 1.0, 2))
    assert mean_interval([5.0, None, math.nan]) == (5.0, None, None, 1)

    ax = plots.sweep_figure(s, "workload.0", "throughput_bps_mean",
                            ["topology.paths.1.bw"]).axes[0]
    whiskers = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    spans = sorted(tuple(np.round(seg[:, 1], 6)) for c in whiskers
                   for seg in c.lines[2][0].get_segments())
    assert (round(8 - half / 1e6, 6), round(8 + half / 1e6, 6)) in spans  # in Mbit/s
    table = means_table(s, ["workload.0", "topology.paths.1.bw"], ["throughput_bps_mean"])
    cell = table.iloc[1]["throughput (Mbit/s): mean [95 % interval] (n)"]
    assert table.iloc[1]["workload.0"] == "mptcp-cubic"
    assert cell == f"8 [{8 - half / 1e6:.4g}, {8 + half / 1e6:.4g}] (n=3)"


def test_an_interval_past_what_the_metric_can_be_is_cut_there_and_says_so():
    # retransmissions 0, 0, 105: mean 35, t interval 35 -+ 150.6 reaches below 0, which a
    # count cannot be; a share of 99, 100, 95 % reaches above 100 %
    s = pd.DataFrame({"run_id": list("abcdef"), "status": "complete", "fidelity": "ok",
                      "transport.cc": ["x"] * 3 + ["y"] * 3,
                      "retransmissions": [0, 0, 105, 5, 6, 7],
                      "ooo_share_pct": [99.0, 100.0, 95.0, 1.0, 2.0, 3.0]})
    assert sweep_stats.metric_bounds("retransmissions") == (0.0, None)
    st = sweep_stats.group_stats(s, "retransmissions", ["transport.cc"]).set_index(
        "transport.cc")
    half = T_975_DF2 * float(np.std([0, 0, 105], ddof=1)) / math.sqrt(3)
    assert st.loc["x", "low"] == 0.0 and st.loc["x", "high"] == pytest.approx(35 + half)
    assert bool(st.loc["x", "cut"]) and not bool(st.loc["y", "cut"])
    assert st.loc["y", "low"] == pytest.approx(6 - T_975_DF2 / math.sqrt(3))
    cells = means_table(s, ["transport.cc"], ["retransmissions"]).iloc[:, -1].tolist()
    assert cells[0] == f"35 [0, {35 + half:.4g}] (n=3, cut at 0)"
    assert cells[1].endswith("(n=3)") and "cut" not in cells[1]
    fig = plots.sweep_figure(s, "transport.cc", "retransmissions", [])
    assert "intervals cut where the metric ends" in fig.get_supxlabel().replace("\n", " ")
    whiskers = [c for c in fig.axes[0].containers if isinstance(c, ErrorbarContainer)]
    lows = [seg[:, 1].min() for c in whiskers for seg in c.lines[2][0].get_segments()]
    assert min(lows) == 0.0
    # a metric the contract does not declare is never cut
    assert sweep_stats.metric_bounds("ooo_share_pct") == (None, None)
    free = sweep_stats.group_stats(s, "ooo_share_pct", ["transport.cc"])
    assert not free["cut"].any() and free["high"].max() > 100


def test_one_run_per_bar_has_no_interval_and_says_so():
    s = _runs()
    s = s[s["repetition"] == 1]
    fig = plots.sweep_figure(s, "workload.0", "throughput_bps_mean", ["topology.paths.1.bw"])
    ax = fig.axes[0]
    assert len(_bars(ax)) == 4
    assert not [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert "1 run per bar, no interval" in fig.get_supxlabel().replace("\n", " ")
    cells = means_table(s, ["workload.0"], ["throughput_bps_mean"]).iloc[:, -1]
    # two bandwidths per workload: 3 and 7, 1 and 3 Mbit/s, whose t intervals (df 1) reach
    # far below 0
    assert all(c.endswith("(n=2, cut at 0)") for c in cells)
    one = means_table(s, ["workload.0", "topology.paths.1.bw"], ["throughput_bps_mean"])
    assert all(c.endswith("(n=1, no interval)") for c in one.iloc[:, -1])


def test_missing_values_are_left_out_counted_and_never_drawn_as_zero():
    s = _runs()
    s.loc[0, "status"] = "failed"  # cubic, 2.5Mbit, repetition 1
    s.loc[4, "throughput_bps_mean"] = math.nan  # cubic, 5Mbit, repetition 2: not measured
    gone = (s["workload.0"] == WIFI) & (s["topology.paths.1.bw"] == "2.5Mbit")
    s.loc[gone, "throughput_bps_mean"] = None  # a whole group without a value
    s.loc[10, "fidelity"] = "warn"  # wifi, 5Mbit, repetition 2
    vals, left = sweep_stats.metric_values(s, "throughput_bps_mean")
    assert (left.not_complete, left.not_measured) == (1, 4)
    assert left.text() == "5 runs left out (1 not complete, 4 not measured)"
    assert vals.isna().sum() == 5

    fig = plots.sweep_figure(s, "workload.0", "throughput_bps_mean", ["topology.paths.1.bw"])
    ax = fig.axes[0]
    heights = [p.get_height() for p in _bars(ax)]
    assert len(heights) == 3 and min(heights) > 1  # the empty group has no bar, no 0
    assert "no value" in [t.get_text() for t in ax.texts]
    note = fig.get_supxlabel().replace("\n", " ")
    assert "5 runs left out (1 not complete, 4 not measured)" in note
    assert "1 run with fidelity not ok (red \u00d7)" in note
    scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
    crosses = [c for c in scatters if c.get_offsets().shape[0] and any(
        np.allclose(rgba[:3], (1, 0, 0)) for rgba in [*c.get_facecolor(), *c.get_edgecolor()])]
    assert sum(c.get_offsets().shape[0] for c in crosses) == 1
    dots = sum(c.get_offsets().shape[0] for c in scatters)
    assert dots == len(s) - 5  # every run with a value, and no other
    st = sweep_stats.group_stats(s, "throughput_bps_mean", ["workload.0",
                                                             "topology.paths.1.bw"])
    cubic_low = st[(st["workload.0"] == CUBIC) & (st["topology.paths.1.bw"] == "2.5Mbit")]
    assert cubic_low[["runs", "n"]].values.tolist() == [[3, 2]]
    table = means_table(s, ["workload.0", "topology.paths.1.bw"], ["throughput_bps_mean"])
    assert table.iloc[2].tolist()[:3] == ["tcp-wifi", "2.5Mbit", 3]
    assert table.iloc[2].iloc[-1] == "no value"
    runs = runs_table(s, ["workload.0"], ["throughput_bps_mean"])
    assert runs.iloc[4, -1] == "" and runs.iloc[3, -1] == "7"  # not measured: empty


def _td_texts(page: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td.*?</td>", page, re.S)]


def test_real_two_run_sweep_report_names_values_and_marks_fidelity(tmp_path: Path):
    """P0's paths spec, two of its real runs (MPTCP and TCP over the WiFi) as a sweep over
    workload.0, the TCP run's fidelity made ``warn``."""
    d = analysed_copy(tmp_path / "sweep")
    for run, verdict in ((MPTCP_RUN, "ok"), (TCP_RUN, "warn")):
        meta = json.loads((d / run / "metadata.json").read_text())
        meta["headline"] = headline(pd.read_parquet(d / run / "metrics" / "flows.parquet"))
        meta["fidelity"] = {"verdict": verdict, "reasons": [] if verdict == "ok" else
                            ["rtt: made up for the test"]}
        (d / run / "metadata.json").write_text(json.dumps(meta))
    write_summary(d)
    s = pd.read_parquet(d / "summary.parquet")
    assert sweep_stats.swept_params(s) == ["workload.0"]  # not the fidelity columns
    out = report.write_report(d, out=tmp_path / "r.html")
    page = out.read_text()
    cells = _td_texts(page)
    assert "mptcp-cubic" in cells and "tcp-wifi" in cells
    assert not [c for c in cells if c.startswith(("{", "[")) or "&quot;" in c]
    assert page.count("<svg") == sum(
        m in s and pd.to_numeric(s[m], errors="coerce").notna().any()
        for m in plots.METRIC_LABELS)
    assert "1 run per bar, no interval" in page and "with fidelity not ok" in page
    png = out.with_name("r-figures") / "throughput_bps_mean-vs-workload_0.png"
    assert png.read_bytes()[:4] == b"\x89PNG"
    # a second render leaves exactly its own figures: one an earlier render drew that this
    # one does not is removed (a link among them as a link), other files stay
    folder = png.parent
    drawn = sorted(p.name for p in folder.iterdir())
    assert len(drawn) == 2 * page.count("<svg")  # a PNG and an SVG of each
    (folder / "gone-vs-workload_0.png").write_bytes(b"stale")
    (folder / "gone-vs-workload_0.svg").symlink_to(tmp_path / "r.html")
    (folder / "notes.txt").write_text("mine")
    report.write_report(d, out=tmp_path / "r.html")
    assert sorted(p.name for p in folder.iterdir()) == sorted([*drawn, "notes.txt"])
    assert (tmp_path / "r.html").is_file()


def test_a_sweep_report_reads_the_bundles_not_a_stale_summary(tmp_path: Path):
    """summary.parquet is written after each run: a run deleted or a value edited since
    is reported as the bundles say now, with a warning; without --out the report
    rewrites the summary."""
    d = analysed_copy(tmp_path / "sweep")
    for run in (MPTCP_RUN, TCP_RUN):
        meta = json.loads((d / run / "metadata.json").read_text())
        meta["headline"] = headline(pd.read_parquet(d / run / "metrics" / "flows.parquet"))
        (d / run / "metadata.json").write_text(json.dumps(meta))
    write_summary(d)
    s = pd.read_parquet(d / "summary.parquet")
    s.loc[0, "bytes"] += 20  # edited after the runs: a small change is a change
    s.to_parquet(d / "summary.parquet")
    assert report._stale(d / "summary.parquet", report.runs_frame(d))
    s["throughput_bps_mean"] = 99e6
    s.to_parquet(d / "summary.parquet")
    warnings: list[str] = []
    report.write_report(d, out=tmp_path / "r.html", warnings=warnings)
    assert [w.split(":")[0] for w in warnings] == ["summary.parquet is stale"]
    assert "99" not in " ".join(_td_texts((tmp_path / "r.html").read_text()))
    shutil.rmtree(d / TCP_RUN)  # a run deleted since
    ctx = report._context(d, analyze=False)
    assert ctx.tables["summary"]["run_id"].tolist() == [MPTCP_RUN]
    write_summary(d)  # what `testbed report DIR` does first
    warnings = []
    report.write_report(d, out=tmp_path / "r2.html", warnings=warnings)
    assert warnings == []


def test_a_metric_no_run_measured_is_named_not_left_out_silently(tmp_path: Path):
    """P1's short flows are 200 KB: no run had a flow under 100 KB, so the short-flow FCT
    figure was left out of its sweep report without a word."""
    from analysis.report_context import ReportContext
    from analysis.report_sweep import sweep_section

    s = _runs().assign(short_fct_s_mean=np.nan, reorder_ratio_mean=0.01)
    page = sweep_section(ReportContext(tmp_path, "sweep", tables={"summary": s}))
    absent = page.split("Not drawn, as no run measured them: ")[1].split("</p>")[0]
    assert "short-flow FCT (ms) (no flow under 100 KB with a completion time)" in absent
    assert not absent.startswith("throughput") and ", throughput (" not in absent  # drawn
    # reordering of an MPTCP connection is its data-level arrival order: said under it
    assert "not packets the network reordered" in page
