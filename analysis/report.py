"""``report.html``: one self-contained page for a run or a sweep.

A report is a list of *sections*; a section is a callable ``section(ctx) -> str`` that
returns an HTML fragment ("" to skip).  `RUN_SECTIONS` / `SWEEP_SECTIONS` are the defaults;
callers (e.g. a study) add their own with ``write_report(dir, extra_sections=[...])``.
Figures are embedded as inline SVG, so the file needs nothing else.

Paper values: a ``paper.toml`` in the directory (or passed as ``paper=``) adds a table of
published numbers next to the measured ones::

    [[value]]
    metric = "throughput_bps_mean"       # a summary / headline column
    label = "MPTCP, 2 paths"             # free text
    value = 7.6e6                        # the paper's number, same unit as the metric
    tolerance = 0.15                     # optional, relative; flags larger differences
    where = { "transport.cc" = "cubic" } # optional: only runs with these parameter values
"""

from __future__ import annotations

import html
import io
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis import plots
from analysis.bundle import HEADLINE_KEYS, analyze_bundle, headline, load_metadata
from testbed.core import safefiles, units
from testbed.core.compat import tomllib
from testbed.core.errors import InputError
from testbed.core.safefiles import (
    atomic_write,
    safe_href,  # noqa: F401  (re-exported for sections)
)
from testbed.host.capture import shortfall

Section = Callable[["ReportContext"], str]
REPORT_NAME = "report.html"
RATE_WARN_FRACTION = 0.5  # warn when a path's peak rate is below this share of its bw


class ReportInputError(InputError):
    """The directory is neither a run bundle nor a sweep, or paper.toml is malformed."""


@dataclass
class ReportContext:
    """What sections see. root: the directory; kind: "run" or "sweep"; tables: loaded
    metrics (run) or {"summary": ...} (sweep); meta: metadata.json; spec_text: spec.toml;
    warnings: messages sections may append to; paper: paper.toml values; figure_dir: where
    figures are also saved as PNG + SVG (None: not saved)."""

    root: Path
    kind: str
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    spec_text: str = ""
    warnings: list[str] = field(default_factory=list)
    paper: list[dict] = field(default_factory=list)
    figure_dir: Path | None = None

    def spec(self) -> dict:
        """The parsed spec ({} when absent or unreadable)."""
        try:
            return tomllib.loads(self.spec_text) if self.spec_text else {}
        except tomllib.TOMLDecodeError:
            return {}


def _esc(x: object) -> str:
    return html.escape(str(x))


def _table(df: pd.DataFrame, max_rows: int = 200) -> str:
    if not len(df):
        return "<p><em>(none)</em></p>"
    more = f"<p><em>{len(df) - max_rows} more rows not shown</em></p>" if len(df) > max_rows \
        else ""
    return df.head(max_rows).to_html(index=False, border=0, classes="tbl", na_rep="",
                                     float_format=lambda v: f"{v:.6g}") + more


def figure_file_name(name: str) -> str:
    """A figure's file stem made from column names (which come from spec keys): only
    letters, digits, ``-`` and ``_`` (anything else becomes ``_``), at most 120 characters,
    never empty, so a ``../`` in a key cannot leave the figures folder."""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_-")[:120]
    return stem or "figure"


def _figure(ctx: ReportContext, fig, name: str, caption: str) -> str:
    """Embed fig as inline SVG; also save it as DIR/figures/<name>.png and .svg."""
    svg = plots.to_svg(fig)
    if ctx.figure_dir is not None:
        base = ctx.figure_dir / figure_file_name(name)
        if base.parent != ctx.figure_dir:  # cannot happen with the name above; be sure
            raise ReportInputError(f"figure name {name!r} leaves {ctx.figure_dir}")
        plots.save(fig, base, svg)
    svg = svg[svg.find("<svg"):]
    return f'<figure class="fig" id="fig-{_esc(name)}">{svg}' \
           f'<figcaption>{_esc(caption)}</figcaption></figure>'


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
    body = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in rows)
    return f"<h2>Run</h2><table class='kv'>{body}</table>" if rows else ""


def spec_section(ctx: ReportContext) -> str:
    """The resolved spec.toml."""
    return f"<h2>Spec</h2><pre>{_esc(ctx.spec_text)}</pre>" if ctx.spec_text else ""


def figures_section(ctx: ReportContext) -> str:
    """Throughput per path and per subflow/flow with events, cwnd, FCT CDF."""
    ts, ev = ctx.tables.get("timeseries"), ctx.tables.get("events")
    out = []
    if ts is not None and len(ts):
        for kind in ("path", "subflow", "flow"):
            if (ts["kind"] == kind).any():
                out.append(_figure(ctx, plots.throughput_figure(ts, kind, ev),
                                   f"throughput-{kind}",
                                   f"Throughput per {kind} (bins of the timeseries table); "
                                   "dashed lines: schedule events."))
    cw = ctx.tables.get("cwnd")
    if cw is not None and len(cw):
        out.append(_figure(ctx, plots.cwnd_figure(cw, ctx.meta.get("t0")), "cwnd",
                           "Congestion window per subflow (sampled with ss)."))
    fl = ctx.tables.get("flows")
    if fl is not None and len(fl) and pd.to_numeric(fl["fct_s"], errors="coerce").notna().any():
        out.append(_figure(ctx, plots.fct_cdf_figure(fl), "fct-cdf",
                           "CDF of flow completion times."))
    return "<h2>Figures</h2>" + "".join(out) if out else ""


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
    return "<h2>Flows</h2>" + _table(t)


def rate_warnings(ctx: ReportContext) -> None:
    """Warn about a run whose measured path rate is far below the configured bandwidth."""
    ts = ctx.tables.get("timeseries")
    paths = ctx.spec().get("topology", {}).get("paths") or []
    if ts is None or not len(ts):
        return
    for p in paths:
        if not isinstance(p, dict) or "name" not in p or "bw" not in p:
            continue
        sub = ts[(ts["kind"] == "path") & (ts["key"] == p["name"])]
        if not len(sub):
            continue
        try:
            bw = units.parse_rate(p["bw"])
        except InputError:
            continue
        peak = float(sub["rate_bps"].max())
        if peak < RATE_WARN_FRACTION * bw:
            ctx.warnings.append(f"path {p['name']}: peak measured rate {peak / 1e6:.3g} Mbit/s "
                                f"is below {RATE_WARN_FRACTION:.0%} of the configured {p['bw']}")
        elif peak > 1.2 * bw:
            ctx.warnings.append(f"path {p['name']}: peak measured rate {peak / 1e6:.3g} Mbit/s "
                                f"exceeds the configured {p['bw']} by more than 20%")


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
        rate_warnings(ctx)
        if ctx.meta.get("status") not in (None, "complete"):
            ctx.warnings.append(f"run status is {ctx.meta.get('status')!r}, not complete")
    if not ctx.warnings:
        return "<h2>Warnings</h2><p>none</p>"
    items = "".join(f"<li>{_esc(w)}</li>" for w in ctx.warnings)
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
    return "<h2>Comparison with the paper</h2>" + _table(pd.DataFrame(rows))


# ---- sweep sections -------------------------------------------------------------------

def _order_key(v: object) -> tuple:
    for parse in (units.parse_rate, units.parse_duration, units.parse_size,
                  units.parse_percent, float):
        try:
            return (0, float(parse(v)), str(v))
        except (InputError, TypeError, ValueError):
            continue
    return (1, 0.0, str(v))


RUN_COLUMNS = {"run_id", "name", "status", "repetition", "seed", "started", "ended", "wall_s",
               "error", "path"}


def swept_params(summary: pd.DataFrame) -> list[str]:
    """Swept parameters: summary columns that are neither run bookkeeping, the seconds
    each run phase took (``setup_s``, ... -- never a dotted key path) nor headline metrics,
    and that take more than one value."""
    skip = RUN_COLUMNS | set(HEADLINE_KEYS)
    return [c for c in summary.columns
            if c not in skip and not re.fullmatch(r"[a-z]+_s", c)
            and summary[c].nunique(dropna=True) > 1]


def sweep_section(ctx: ReportContext) -> str:
    """Each metric vs each swept parameter, one line per combination of the others."""
    s = ctx.tables.get("summary")
    if s is None or not len(s):
        return "<h2>Sweep</h2><p><em>no runs</em></p>"
    params = swept_params(s)
    metrics = [m for m in plots.METRIC_LABELS if m in s and pd.to_numeric(
        s[m], errors="coerce").notna().any()]
    out = ["<h2>Sweep</h2>"]
    if "status" in s:
        bad = s[s["status"] != "complete"]
        for _, r in bad.iterrows():
            ctx.warnings.append(f"run {r.get('run_id', '?')} is {r['status']}")
    for p in params:
        others = [q for q in params if q != p]
        order = sorted(s[p].dropna().unique(), key=_order_key)
        for m in metrics:
            data = s.assign(**{m: pd.to_numeric(s[m], errors="coerce")})
            out.append(_figure(ctx, plots.sweep_figure(data, p, m, others or None, order),
                               f"{m}-vs-{p}",
                               f"{m} vs {p}: mean and standard deviation over repetitions; "
                               f"one line per {', '.join(others) or 'run set'}."))
    cols = ["run_id", "status", "repetition", *params, *metrics]
    out.append("<h3>Runs</h3>" + _table(s[[c for c in cols if c in s]]))
    return "".join(out)


_VERDICT_TEXT = {
    "ok": "the emulation kept up: every fidelity check passed",
    "warn": "read these numbers with care: the emulation may not have kept up",
    "fail": "do not trust these numbers: the emulation did not keep up",
    "unknown": "no fidelity data (a run not analysed yet, or made before the checks)",
}


def fidelity_banner(verdicts: Sequence[tuple[str, str, Sequence[str]]]) -> str:
    """The banner at the top of a report: one line per verdict kind, reasons listed.

    verdicts: (run id, verdict, reasons) per run.
    """
    if not verdicts:
        return ""
    worst = max((v for _r, v, _x in verdicts),
                key=lambda v: {"ok": 0, "unknown": 1, "warn": 2, "fail": 3}.get(v, 1))
    counts = pd.Series([v for _r, v, _x in verdicts]).value_counts()
    head = ", ".join(f"{n} {v}" for v, n in counts.items()) if len(verdicts) > 1 else worst
    items = "".join(f"<li><b>{_esc(run)}</b>: {_esc(r)}</li>" for run, v, reasons in verdicts
                    if v != "ok" for r in reasons[:6])
    return (f"<div class='fid fid-{_esc(worst)}' id='fidelity'><b>Fidelity: {_esc(head)}</b>"
            f" &mdash; {_esc(_VERDICT_TEXT.get(worst, ''))} "
            "(docs/fidelity.md says how each check is made)"
            + (f"<ul>{items}</ul>" if items else "") + "</div>")


def run_fidelity_section(ctx: ReportContext) -> str:
    """The run's fidelity verdict as a banner (metadata.json -> fidelity)."""
    fid = ctx.meta.get("fidelity") if isinstance(ctx.meta.get("fidelity"), dict) else {}
    return fidelity_banner([(ctx.meta.get("run_id") or ctx.root.name,
                             fid.get("verdict", "unknown"), fid.get("reasons") or [])])


def sweep_fidelity_section(ctx: ReportContext) -> str:
    """Every run's fidelity verdict (summary.parquet's ``fidelity`` columns)."""
    s = ctx.tables.get("summary")
    if s is None or not len(s):
        return ""
    verdict = s["fidelity"] if "fidelity" in s else pd.Series("unknown", index=s.index)
    reasons = s["fidelity_reasons"] if "fidelity_reasons" in s else pd.Series(None, s.index)
    return fidelity_banner([(str(r), str(v) if isinstance(v, str) else "unknown",
                             str(x).split("; ") if isinstance(x, str) and x else [])
                            for r, v, x in zip(s.get("run_id", s.index), verdict, reasons,
                                               strict=True)])


RUN_SECTIONS: tuple[Section, ...] = (run_fidelity_section, metadata_section, figures_section,
                                     flows_section, paper_section, spec_section,
                                     warnings_section)
SWEEP_SECTIONS: tuple[Section, ...] = (sweep_fidelity_section, sweep_section, paper_section,
                                       warnings_section)

_CSS = """body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}
table.tbl,table.kv{border-collapse:collapse;font-size:12px}
.tbl td,.tbl th,.kv td,.kv th{border:1px solid #ccc;padding:2px 6px;text-align:right}
.kv th{text-align:left;background:#f4f4f4}pre{background:#f6f6f6;padding:8px;overflow:auto}
figure.fig{margin:1em 0}figure.fig svg{max-width:100%;height:auto}ul.warn li{color:#a40}
.fid{padding:8px 12px;border-radius:4px;margin:1em 0;border:1px solid}
.fid-ok{background:#eaf6ea;border-color:#7b7}.fid-warn,.fid-unknown{background:#fff6e0;
border-color:#d90}.fid-fail{background:#fde8e8;border-color:#c44}.fid ul{margin:.3em 0}"""


def load_paper(path: Path) -> list[dict]:
    """Read paper.toml ([[value]] entries with metric and value)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8", errors="replace"))
    except tomllib.TOMLDecodeError as exc:
        raise ReportInputError(f"{path}: not valid TOML ({exc}); fix the file") from None
    except OSError as exc:
        raise ReportInputError(f"{path}: cannot read it ({exc.strerror})") from None
    except RecursionError:
        raise ReportInputError(f"{path}: not valid TOML (nested too deeply)") from None
    vals = data.get("value", [])
    if not isinstance(vals, list):
        raise ReportInputError(f"{path}: value must be an array of tables ([[value]])")
    for i, v in enumerate(vals):
        if not isinstance(v, dict) or "metric" not in v or "value" not in v:
            raise ReportInputError(f"{path}: value[{i}] needs 'metric' and 'value' keys")
        number = (int, float)
        if isinstance(v["value"], bool) or not isinstance(v["value"], number) or \
                not isinstance(v["metric"], str) or \
                not isinstance(v.get("tolerance", 0), number) or \
                not isinstance(v.get("where", {}), dict):
            raise ReportInputError(f"{path}: value[{i}]: metric must be a string, value and "
                                   "tolerance numbers, where a table")
    return vals


def _read_parquet(path: Path) -> pd.DataFrame:
    """A parquet file of the folder (no link followed); a corrupt one is a one-line error."""
    import pyarrow as pa

    try:
        return pd.read_parquet(io.BytesIO(safefiles.read_bytes(path)))
    except (OSError, ValueError, pa.ArrowException) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ReportInputError(f"{path}: not a readable parquet table ({first}); "
                               "re-run `testbed analyze` or the run") from None


def _context(root: Path, analyze: bool = True) -> ReportContext:
    """What the sections see of root; analyze: analyse a run that has no metrics/ yet
    (False: refuse instead, so that root is only read).  Files that are symbolic links (or
    not regular files) inside the folder are skipped, each with a warning."""
    skipped: list[str] = []
    if any(safefiles.check(root, root / rel, want) in (None, safefiles.SYMLINK)
           for rel, want in (("metadata.json", "file"), ("pcap", "dir"), ("metrics", "dir"))):
        meta_file = safefiles.file_in(root, "metadata.json", skipped)
        ctx = ReportContext(root, "run", meta=load_metadata(root) if meta_file else {})
        metrics = safefiles.check(root, root / "metrics", "dir")
        if metrics == safefiles.SYMLINK:
            raise ReportInputError(f"{root / 'metrics'}: a symbolic link (not followed); "
                                   "the report neither reads nor writes through it")
        if safefiles.file_in(root, "metrics/flows.parquet") is None:
            if not analyze:
                why = safefiles.check(root, root / "metrics" / "flows.parquet")
                what = "no metrics/flows.parquet" if why in (None, "missing") else \
                    f"metrics/flows.parquet is {why}"
                raise ReportInputError(
                    f"{root}: not analysed yet ({what}); the analysis writes into the "
                    f"run: `testbed report {root}` without --out does it")
            try:
                analyze_bundle(root, warnings=skipped)
            except OSError as exc:
                raise ReportInputError(f"{root}: cannot write its metrics/ "
                                       f"({exc.strerror}: {exc.filename})") from None
        for name in ("flows", "timeseries", "cwnd", "ping", "events"):
            p = safefiles.file_in(root, f"metrics/{name}.parquet", skipped)
            if p is not None:
                ctx.tables[name] = _read_parquet(p)
        spec = safefiles.file_in(root, "spec.toml", skipped)
        ctx.spec_text = safefiles.read_text(spec) if spec is not None else ""
        ctx.warnings.extend(skipped)
        return ctx
    summary = safefiles.file_in(root, "summary.parquet", skipped)
    if summary is not None:
        data = _read_parquet(summary)
        return ReportContext(root, "sweep", tables={"summary": data}, warnings=skipped)
    raise ReportInputError(f"{root}: neither a run bundle (metadata.json, pcap/ or metrics/) "
                           "nor a sweep (summary.parquet); pass the --out DIR of testbed run"
                           + (f" ({'; '.join(skipped)})" if skipped else ""))


def render(ctx: ReportContext, sections: Sequence[Section]) -> str:
    """The HTML page of the given sections (warnings section always last)."""
    body = [s(ctx) for s in sections if s is not warnings_section]
    if warnings_section in sections:
        body.append(warnings_section(ctx))
    title = f"{ctx.kind} report: {ctx.root.name}"
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_esc(title)}</title>"
            f"<style>{_CSS}</style></head><body><h1>{_esc(title)}</h1>{''.join(body)}"
            f"<footer><small>generated by testbed report; "
            f"{_esc(json.dumps({'sections': len(body)}))}</small></footer></body></html>")


def write_report(directory: str | Path, extra_sections: Sequence[Section] = (),
                 paper: str | Path | None = None, out: str | Path | None = None,
                 warnings: list[str] | None = None) -> Path:
    """Write ``report.html`` for a run bundle or a sweep directory; return its path.

    directory: run bundle or sweep DIR; extra_sections: more `Section` callables (placed
    before the warnings); paper: a paper.toml (default: DIR/paper.toml when present);
    out: output file (default DIR/report.html, figures also saved in DIR/figures/).  With
    out, DIR is only read, never written: figures are embedded in the page and also saved
    beside it in ``<out stem>-figures/``, and a run whose analysis has not been done is
    refused (the analysis writes DIR/metrics/); warnings: gets a line for every file of
    the folder that was skipped (a symbolic link is never followed).
    """
    root = Path(directory)
    if not root.is_dir():
        raise ReportInputError(f"{root}: no such directory; pass a run or sweep directory")
    target = Path(out) if out else root / REPORT_NAME
    ctx = _context(root, analyze=not out)
    if out:
        ctx.figure_dir = target.with_name(f"{target.stem}-figures")
    else:
        figures = safefiles.check(root, root / "figures", "dir")
        if figures in (None, "missing"):
            ctx.figure_dir = root / "figures"
        else:
            ctx.warnings.append(f"figures not saved: {root / 'figures'} is {figures}")
    if paper:
        pp = Path(paper)
        if not pp.is_file():
            raise ReportInputError(f"{pp}: no such paper values file")
        ctx.paper = load_paper(pp)
    elif safefiles.file_in(root, "paper.toml", ctx.warnings) is not None:
        ctx.paper = load_paper(root / "paper.toml")
    base = RUN_SECTIONS if ctx.kind == "run" else SWEEP_SECTIONS
    sections = [s for s in base if s is not warnings_section] + list(extra_sections) + \
        [warnings_section]
    page = render(ctx, sections)
    if warnings is not None:
        warnings.extend(w for w in ctx.warnings if w.startswith(("skipped ", "figures not")))
    try:
        atomic_write(target, lambda p: p.write_text(page, encoding="utf-8"))
    except OSError as exc:
        hint = "choose another --out FILE" if out else "pass --out FILE"
        raise ReportInputError(f"{target}: cannot write the report ({exc.strerror}); "
                               f"{hint}") from None
    return target
