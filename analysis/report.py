"""``report.html``: one self-contained page for a run or a sweep.

A report is a list of *sections*; a section is a callable ``section(ctx) -> str`` that
returns an HTML fragment ("" to skip) from a `ReportContext` (`analysis.report_context`).
`RUN_SECTIONS` / `SWEEP_SECTIONS` (`analysis.report_sections`) are the defaults; callers
(e.g. a study) add their own with ``write_report(dir, extra_sections=[...])``.  Figures are
embedded as inline SVG, so the file needs nothing else.  This module reads the folder
into the context (a run is analysed first when it has no metrics yet) and writes the page.

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

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.bundle import analyze_bundle, load_metadata
from analysis.report_context import ReportContext, ReportInputError, Section, esc
from analysis.report_sections import RUN_SECTIONS, SWEEP_SECTIONS, warnings_section
from testbed.core import safefiles
from testbed.core.compat import tomllib
from testbed.core.errors import InputError
from testbed.core.safefiles import atomic_write
from testbed.results.bundle import BROKEN, Bundle, bundles
from testbed.results.folders import sweep_folders
from testbed.results.query import check_readable
from testbed.results.summary import runs_frame

REPORT_NAME = "report.html"

_CSS = """body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}
table.tbl,table.kv{border-collapse:collapse;font-size:12px}
.tbl td,.tbl th,.kv td,.kv th{border:1px solid #ccc;padding:2px 6px;text-align:right}
.kv th{text-align:left;background:#f4f4f4}pre{background:#f6f6f6;padding:8px;overflow:auto}
figure.fig{margin:1em 0}figure.fig svg{max-width:100%;height:auto}ul.warn li{color:#a40}
.fid{padding:8px 12px;border-radius:4px;margin:1em 0;border:1px solid}
.fid-ok{background:#eaf6ea;border-color:#7b7}.fid-warn,.fid-unknown{background:#fff6e0;
border-color:#d90}.fid-fail{background:#fde8e8;border-color:#c44}.fid ul{margin:.3em 0}"""


def load_paper(path: Path) -> list[dict[str, Any]]:
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
                               "`testbed verify` on its run says what changed; re-run "
                               "the run") from None


def _stale(summary: Path, runs: pd.DataFrame) -> bool:
    """Whether the stored summary.parquet says something else than the bundles now do
    (runs added, gone or changed since it was written; unreadable counts as stale)."""
    try:
        stored = _read_parquet(summary)
    except ReportInputError:
        return True
    if "run_id" not in stored.columns or set(stored.columns) != set(runs.columns):
        return True
    # `path` is where the bundle is: a folder copied elsewhere has not changed
    cols = [c for c in runs.columns if c != "path"]

    def plain(df: pd.DataFrame) -> pd.DataFrame:  # a missing value is None, any dtype
        df = df.sort_values("run_id").reset_index(drop=True)[cols].astype(object)
        return df.where(df.notna(), None)

    a, b = plain(stored), plain(runs)
    try:
        pd.testing.assert_frame_equal(a, b, check_dtype=False, check_exact=True)
    except (AssertionError, TypeError, ValueError):
        return True
    return False


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
        # the run's record lists its metrics once analysed (`files`); a deferred analysis
        # (a run made in the VM) or a bundle of captures only has none listed
        files = ctx.meta.get("files")
        analysed = ctx.meta.get("analysis") != "deferred" and isinstance(files, dict) \
            and "metrics/flows.parquet" in files
        if safefiles.file_in(root, "metrics/flows.parquet") is None and analysed:
            # analysed once (by the run itself, or on this machine), then lost or damaged:
            # analysing again here would rewrite every table without a look at the
            # manifest; `testbed verify --update` checks the captures first
            skipped.append("metrics/flows.parquet is missing or not a regular file, and "
                           "the run was analysed: not analysed again here (`testbed "
                           f"verify --update {root.parent}` does, once its captures match "
                           "their sha256 manifest)")
        elif safefiles.file_in(root, "metrics/flows.parquet") is None:
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
        status, why = Bundle(root).status_and_why()
        if status == BROKEN and ctx.meta:  # e.g. a table lost: not the run it says it is
            ctx.meta = {**ctx.meta, "status": BROKEN}
            skipped.append(f"the run is broken: {why}; this page shows what is left of it "
                           "(`testbed verify --update` makes lost metrics again)")
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
        for bundle in bundles(root):
            bundle.load_metadata()  # refuses a bundle in a newer format (BundleFormatError)
        # the runs as the bundles say now, as `testbed query` reads them: summary.parquet
        # is only written after each run, so a run deleted, damaged or re-analysed since
        # would be reported as it was
        try:
            check_readable(root)
        except InputError as exc:
            raise ReportInputError(str(exc)) from None
        data = runs_frame(root)
        if _stale(summary, data):
            skipped.append(f"summary.parquet is stale: {summary} was written before the "
                           "bundles last changed; this report reads the bundles "
                           "(`testbed report DIR` without --out rewrites it)")
        return ReportContext(root, "sweep", tables={"summary": data}, warnings=skipped)
    studies = sweep_folders(root)
    hint = (f"it is a study's output: report one spec's folder, e.g. {root / studies[0]}, or "
            "the whole study with `testbed study experiments/<study> --report-only`" if studies else
            "pass the --out DIR of testbed run")
    raise ReportInputError(f"{root}: neither a run bundle (metadata.json, pcap/ or metrics/) "
                           f"nor a sweep (summary.parquet); {hint}"
                           + (f" ({'; '.join(skipped)})" if skipped else ""))


def render(ctx: ReportContext, sections: Sequence[Section]) -> str:
    """The HTML page of the given sections (warnings section always last)."""
    body = [s(ctx) for s in sections if s is not warnings_section]
    if warnings_section in sections:
        body.append(warnings_section(ctx))
    title = f"{ctx.kind} report: {ctx.root.name}"
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
            f"<style>{_CSS}</style></head><body><h1>{esc(title)}</h1>{''.join(body)}"
            "<footer><small>generated by testbed report</small></footer></body></html>")


def _check_out(root: Path, target: Path) -> None:
    """Refuse an --out FILE (or its figures folder) inside the folder reported on: with
    --out that folder is only read, and the page would replace one of its files."""
    top = root.resolve()
    for p in (target, target.with_name(f"{target.stem}-figures")):
        where = p.parent.resolve() / p.name
        if where == top or top in where.parents:
            raise ReportInputError(f"--out {target}: inside {root}, which a report with "
                                   "--out only reads; choose a file outside it, or leave "
                                   f"out --out to write {root / REPORT_NAME}")


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
        what = "a file, not a run or sweep folder" if root.exists() else "no such folder"
        raise ReportInputError(f"{root}: {what}; pass a run's bundle or a sweep's folder (the "
                               "--out DIR of testbed run)")
    target = Path(out) if out else root / REPORT_NAME
    if out:
        _check_out(root, target)
    ctx = _context(root, analyze=not out)
    if out:
        figures = target.with_name(f"{target.stem}-figures")
        why = safefiles.check(figures.parent, figures, "dir")
        if why in (None, "missing"):
            ctx.figure_dir = figures
        else:  # a link planted there would take the figures elsewhere
            ctx.warnings.append(f"figures not saved: {figures} is {why}")
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
    ctx.remove_stale_figures()
    if warnings is not None:
        warnings.extend(w for w in ctx.warnings if w.startswith(("skipped ", "figures not",
                                                         "summary.parquet is stale",
                                                         "the run is broken")))
    try:
        atomic_write(target, lambda p: p.write_text(page, encoding="utf-8"))
    except OSError as exc:
        hint = "choose another --out FILE" if out else "pass --out FILE"
        raise ReportInputError(f"{target}: cannot write the report ({exc.strerror}); "
                               f"{hint}") from None
    return target
