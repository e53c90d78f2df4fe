"""The default sections of a run report and of a sweep report, and their warnings.

Each section is a `Section` (``section(ctx) -> str``, "" to skip).  `RUN_SECTIONS`: the
fidelity banner, the run's metadata, figures, the flow table, paper values, the spec and
the warnings (capture losses, path rates far from the configured bandwidth, a run that did
not complete).  `SWEEP_SECTIONS`: every run's fidelity, each metric against each swept
parameter with the means over repetitions (`analysis.report_sweep`), paper values and
warnings.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis import plots
from analysis.bundle import headline
from analysis.report_context import ReportContext, Section, esc, figure, html_table
from analysis.report_fidelity import run_fidelity_section, sweep_fidelity_section
from analysis.report_sweep import sweep_section
from testbed.core.capture_counts import shortfall

# ---- run sections ---------------------------------------------------------------------

def metadata_section(ctx: ReportContext) -> str:
    """Status, times, kernel and versions from metadata.json."""
    m = ctx.meta
    keys = ["name", "status", "repetition", "seed", "started", "ended", "wall_s", "kernel",
            "git_revision", "error"]
    rows = [(k, m[k]) for k in keys if m.get(k) not in (None, "")]
    for k, v in m.items():
        if k not in keys and isinstance(v, (str, int, float)) and len(str(v)) < 120:
            rows.append((k, v))
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    return f"<h2>Run</h2><table class='kv'>{body}</table>" if rows else ""


def spec_section(ctx: ReportContext) -> str:
    """The resolved spec.toml."""
    return f"<h2>Spec</h2><pre>{esc(ctx.spec_text)}</pre>" if ctx.spec_text else ""


def figures_section(ctx: ReportContext) -> str:
    """Throughput per path and per subflow/flow with events, cwnd, FCT CDF."""
    ts, ev = ctx.tables.get("timeseries"), ctx.tables.get("events")
    out = []
    if ts is not None and len(ts):
        for kind in ("path", "subflow", "flow"):
            if (ts["kind"] == kind).any():
                out.append(figure(ctx, plots.throughput_figure(ts, kind, ev),
                                  f"throughput-{kind}",
                                  f"Throughput per {kind} (bins of the timeseries table); "
                                  "dashed lines: schedule events."))
    cw = ctx.tables.get("cwnd")
    if cw is not None and len(cw):
        out.append(figure(ctx, plots.cwnd_figure(cw, ctx.meta.get("t0")), "cwnd",
                          "Congestion window per subflow (sampled with ss). "
                          + cwnd_timing(cw)))
    fl = ctx.tables.get("flows")
    if fl is not None and len(fl) and pd.to_numeric(fl["fct_s"], errors="coerce").notna().any():
        out.append(figure(ctx, plots.fct_cdf_figure(fl), "fct-cdf",
                          "CDF of flow completion times."))
    return "<h2>Figures</h2>" + "".join(out) if out else ""


def cwnd_timing(cw: pd.DataFrame) -> str:
    """How well the cwnd samples' times are known, in words (docs/transport.md)."""
    runs = pd.to_numeric(cw["sample_s"], errors="coerce").dropna() if "sample_s" in cw \
        else pd.Series(dtype=float)
    if not len(runs):
        return ("Each sample is drawn at the start of its ss run (a bundle before format "
                "1.8): up to one run earlier than ss read the socket.")
    return (f"Each sample is drawn at the middle of its ss run: the run took "
            f"{runs.median() * 1e3:.0f} ms (median; longest {runs.max() * 1e3:.0f} ms), and "
            "each point lies within half its run of the moment ss read the socket.")


def flows_section(ctx: ReportContext) -> str:
    """The per-flow table."""
    fl = ctx.tables.get("flows")
    if fl is None:
        return ""
    cols = ["flow_id", "protocol", "parent", "bytes", "fct_s", "throughput_bps",
            "retransmissions", "reordered_packets", "reorder_ratio", "rtt_ms_median", "workload"]
    t = fl[[c for c in cols if c in fl]].copy()
    for c in t.columns:
        if not pd.api.types.is_numeric_dtype(t[c]):
            t[c] = t[c].fillna("")
    return "<h2>Flows</h2>" + html_table(t)


def capture_losses(stats: dict[str, dict[str, int | None]]) -> list[str]:
    """Warnings for captures that miss packets, from a bundle's ``captures`` metadata
    ({pcap name: {captured, received, dropped}}, tcpdump's closing counts): packets the
    kernel dropped, and packets it handed over that tcpdump never wrote (on loopback the
    kernel counts each packet twice)."""
    out = []
    for name, st in sorted((stats or {}).items()):
        short = shortfall(st, loopback=name.endswith("-lo.pcap")) \
            if isinstance(st, dict) else None
        if short is None or not any(short):
            continue
        total = int(st["received"]) // (2 if name.endswith("-lo.pcap") else 1)
        out.append(f"capture {name}: {short[0]} packets dropped by the kernel and "
                   f"{short[1]} never written, of {total}; flow bytes, "
                   "throughput and reordering from this capture are incomplete")
    return out


def warnings_section(ctx: ReportContext) -> str:
    """Warnings gathered while building the report."""
    if ctx.kind == "run":
        ctx.warnings.extend(capture_losses(ctx.meta.get("captures") or {}))
        if ctx.meta.get("status") not in (None, "complete"):
            ctx.warnings.append(f"run status is {ctx.meta.get('status')!r}, not complete")
    if not ctx.warnings:
        return "<h2>Warnings</h2><p>none</p>"
    items = "".join(f"<li>{esc(w)}</li>" for w in ctx.warnings)
    return f"<h2>Warnings</h2><ul class='warn'>{items}</ul>"


def paper_section(ctx: ReportContext) -> str:
    """Paper values next to measured ones (from paper.toml)."""
    if not ctx.paper:
        return ""
    if ctx.kind == "sweep":
        data = ctx.tables.get("summary", pd.DataFrame())
    else:
        data = pd.DataFrame([headline(ctx.tables["flows"])]) if "flows" in ctx.tables \
            else pd.DataFrame()
    rows = []
    for v in ctx.paper:
        sel = data
        for k, want in (v.get("where") or {}).items():
            sel = sel[sel[k].astype(str) == str(want)] if k in sel else sel.iloc[0:0]
        col = v["metric"]
        measured = float(pd.to_numeric(sel[col], errors="coerce").mean()) if col in sel \
            and len(sel) else math.nan
        paper = float(v["value"])
        rel = (measured - paper) / paper if paper and measured == measured else math.nan
        tol = v.get("tolerance")
        flag = "" if tol is None or rel != rel else ("ok" if abs(rel) <= float(tol) else "differs")
        rows.append({"label": v.get("label", ""), "metric": col, "paper": paper,
                     "measured": measured, "difference": f"{rel:+.1%}" if rel == rel else "",
                     "check": flag})
    return "<h2>Comparison with the paper</h2>" + html_table(pd.DataFrame(rows))


RUN_SECTIONS: tuple[Section, ...] = (run_fidelity_section, metadata_section, figures_section,
                                     flows_section, paper_section, spec_section,
                                     warnings_section)
SWEEP_SECTIONS: tuple[Section, ...] = (sweep_fidelity_section, sweep_section, paper_section,
                                       warnings_section)
