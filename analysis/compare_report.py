"""A comparison of sides (`analysis.compare`) built from paths, and its HTML page.

`build` reads the paths, forms the sides (A first, the reference) and compares every
other side with A; `table_rows` gives each pair's rows as text for the terminal and the
page alike; `write_page` writes ``compare.html`` into the --out folder, figures embedded as
base64 PNG, so the file needs nothing beside it.  The inputs are only read: the --out
folder may not be one of them or inside one.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from analysis import plots
from analysis.compare import (
    COLUMNS,
    Row,
    Side,
    compare_pair,
    flow_series,
    form_sides,
    load_runs,
    load_side,
    need_two,
    top_flows,
    total_series,
)
from analysis.report_context import esc
from testbed.core.errors import InputError
from testbed.core.safefiles import atomic_write

PAGE = "compare.html"
LETTERS = "ABCDEFGH"
NOTES = (
    "A is the reference: every difference is B - A, in the row's unit, with the 95 % "
    "interval of B - A by Welch's t (variances not assumed equal).",
    "reading: 'B higher' / 'B lower' when the interval lies wholly above / below 0; "
    "'inconclusive' when it holds 0; one value on a side gives no interval.",
    "Run rows: one value per run, the mean over a side's runs shown; n counts runs.",
    "Flow rows: one value per flow or MPTCP connection (subflows left out), pooled over a "
    "side's runs; n counts flows.  Flows of one run share its network, so this interval "
    "is narrower than one over repeated runs would be: repeat runs to be sure.",
    "! after a value: some of its runs have a fidelity verdict other than ok (warn, fail "
    "or unknown): the emulation may not have kept up (docs/fidelity.md).",
)


@dataclass
class Comparison:
    """sides: A first; pairs: (index of a side, its rows against A); warnings: lines;
    by: the swept key whose values name the sides (None: each side a path)."""

    sides: list[Side]
    pairs: list[tuple[int, list[Row]]]
    warnings: list[str]
    by: str | None = None

    def title(self, i: int) -> str:
        """``B: spray against A: single-path (the reference; sides by controller.kind)``"""
        by = f"; sides by {self.by}" if self.by else ""
        return f"{self.name(i)} against {self.name(0)} (the reference{by})"

    def name(self, i: int) -> str:
        """``A: static`` -- a side's letter and label."""
        return f"{LETTERS[i]}: {self.sides[i].label}"


def build(paths: Sequence[Path], by: str | None = None, where: Sequence[str] = (),
          labels: Sequence[str] = ()) -> Comparison:
    """Read paths and compare (see `analysis.compare.form_sides` for by, where, labels)."""
    need_two(paths, by)  # before anything is read
    warnings: list[str] = []
    runs = load_runs([Path(p) for p in paths], warnings)
    parts = form_sides(runs, [Path(p) for p in paths], by, where, labels, warnings)
    if len(parts) > len(LETTERS):
        raise InputError(f"{len(parts)} sides; compare at most {len(LETTERS)} at once "
                         "(pick values with --by KEY=V1,V2)")
    sides = [load_side(label, part) for label, part in parts]
    pairs = [(i, compare_pair(sides[0], sides[i])) for i in range(1, len(sides))]
    return Comparison(sides, pairs, warnings, by.partition("=")[0] if by else None)


def table_header(cmp: Comparison, i: int) -> list[str]:
    """The column headers of side i against A, naming both sides."""
    head = list(COLUMNS)
    head[1], head[2] = cmp.name(0), cmp.name(i)
    head[3], head[4] = f"{LETTERS[i]} - A", f"95 % interval of {LETTERS[i]} - A"
    head[6] = f"reading ({LETTERS[i]} against A)"
    return head


def table_rows(cmp: Comparison, i: int, rows: list[Row]) -> list[list[str]]:
    """Rows as text: the fidelity verdicts, then one row per metric."""
    a, b = cmp.sides[0], cmp.sides[i]
    out = [["fidelity verdicts (runs)", a.verdicts(), b.verdicts(), "", "",
            f"{len(a.runs)} / {len(b.runs)} runs", ""]]
    for r in rows:
        cells = r.cells()
        cells[6] = cells[6].replace("B ", f"{LETTERS[i]} ")
        out.append(cells)
    return out


def check_out(out: Path, paths: Sequence[Path]) -> None:
    """Refuse an --out folder that is one of the inputs or inside one."""
    target = Path(out).resolve()
    for p in paths:
        src = Path(p).resolve()
        if target == src or src in target.parents:
            raise InputError(f"--out {out}: inside the input {p}; a comparison never writes "
                             "into what it compares: choose another folder")
    if Path(out).exists() and not Path(out).is_dir():
        raise InputError(f"--out {out}: not a folder")


def _figures(cmp: Comparison) -> list[tuple[str, Figure]]:
    names = [cmp.name(i) for i in range(len(cmp.sides))]
    per_flow = [(n, flow_series(s).assign(line=lambda d: d["run_id"] + " " + d["key"]))
                for n, s in zip(names, cmp.sides, strict=True)]
    totals = []
    for n, s in zip(names, cmp.sides, strict=True):
        t = total_series(s)
        width = float(flow_series(s)["bin_s"].min()) if len(t) else 0.0
        totals.append((n, pd.DataFrame({"line": "total", "t_rel": t.index.to_numpy(float),
                                        "bin_s": width, "rate_bps": t.to_numpy(float)})))
    fct = [(n, pd.to_numeric(top_flows(s.tables["flows"]).get("fct_s", pd.Series(
        dtype=float)), errors="coerce").dropna().to_numpy(float) * 1e3)
           for n, s in zip(names, cmp.sides, strict=True)]
    rtt = [(n, pd.to_numeric(s.tables["rtt"].get("rtt_ms", pd.Series(dtype=float)),
                             errors="coerce").dropna().to_numpy(float))
           for n, s in zip(names, cmp.sides, strict=True)]
    out = [("Throughput per flow or MPTCP connection, every run of a side (one colour "
            "per side; metrics/timeseries.parquet, t_rel >= 0).",
            plots.sides_series_figure(per_flow, "Throughput per flow / connection")),
           ("Total throughput of a run's flows and connections, mean over the side's "
            "runs (a run without a bin counts 0).",
            plots.sides_series_figure(totals, "Total throughput, mean over runs"))]
    if any(len(x) for _n, x in fct):
        out.append(("CDF of flow completion times (fct_s of flows and MPTCP connections, "
                    "pooled over a side's runs).",
                    plots.sides_cdf_figure(fct, "Flow completion time",
                                           "flow completion time (ms)")))
    if any(len(x) for _n, x in rtt):
        out.append(("CDF of RTT samples (metrics/rtt.parquet, every flow and subflow, "
                    "pooled over a side's runs).",
                    plots.sides_cdf_figure(rtt, "RTT samples", "RTT (ms)")))
    return out


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table class='tbl'><tr>{th}</tr>{body}</table>"


_CSS = """body{font-family:sans-serif;max-width:1200px;margin:2em auto;color:#222}
table.tbl{border-collapse:collapse;font-size:12px;margin:.5em 0}
.tbl td,.tbl th{border:1px solid #ccc;padding:2px 6px;text-align:right}
.tbl td:first-child,.tbl th{text-align:left}.tbl th{background:#f4f4f4}
img{max-width:100%}ul.warn li{color:#a40}"""


def render(cmp: Comparison) -> str:
    """The page: sides, one table per pair, notes, figures, warnings."""
    title = "compare: " + ", ".join(cmp.name(i) for i in range(len(cmp.sides))) + \
        (f" (sides by {cmp.by})" if cmp.by else "")
    side_rows = [[cmp.name(i), str(len(s.runs)), s.verdicts(),
                  ", ".join(sorted(set(map(str, s.runs["run_id"]))))]
                 for i, s in enumerate(cmp.sides)]
    parts = [f"<h1>{esc(title)}</h1>", "<h2>Sides</h2>",
             _html_table(["side", "runs", "fidelity verdicts", "run ids"], side_rows)]
    for i, rows in cmp.pairs:
        parts.append(f"<h2>{esc(cmp.title(i))}</h2>")
        parts.append(_html_table(table_header(cmp, i), table_rows(cmp, i, rows)))
    parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in NOTES) + "</ul>")
    parts.append("<h2>Figures</h2>")
    for caption, fig in _figures(cmp):
        png = base64.b64encode(plots.to_png(fig)).decode("ascii")
        parts.append(f"<figure><img alt='{esc(caption)}' src='data:image/png;base64,{png}'>"
                     f"<figcaption>{esc(caption)}</figcaption></figure>")
    items = "".join(f"<li>{esc(w)}</li>" for w in cmp.warnings) or "<li>none</li>"
    parts.append(f"<h2>Warnings</h2><ul class='warn'>{items}</ul>")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
            f"<style>{_CSS}</style></head><body>{''.join(parts)}"
            "<footer><small>generated by testbed compare</small></footer></body></html>")


def write_page(cmp: Comparison, out: Path, paths: Sequence[Path]) -> Path:
    """Write out/compare.html (out is made if missing); return its path."""
    check_out(out, paths)
    page = render(cmp)
    target = Path(out) / PAGE
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
        atomic_write(target, lambda p: p.write_text(page, encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{target}: cannot write it ({exc.strerror}); choose another "
                         "--out") from None
    return target
