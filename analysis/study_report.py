"""A study's paper-vs-ours report: ``out/report.html`` and ``out/claims.json``.

`evaluate(study, out)` reads a study folder's ``paper.toml`` and the result folders that
``testbed study`` wrote (``out/<spec stem>/`` with one bundle per run), and has the study
named by the paper's id (`analysis.study_registry`) fill a `StudyResult`.
`write_study_report` renders it into ``out/report.html`` with the paper's figures
redrawn from our runs (the study's ``figures``, `analysis.study_figures`; PNGs in
``out/report-figures/``), a paper-vs-ours table with the ratio, links to each spec's own
report, the fidelity verdict of every run, and writes the claims' verdicts to
``out/claims.json``.  A claim's row shows its verdict (holds, does not hold,
inconclusive, no data) in words (`analysis.study_text`) and, per part of its evidence, the
repetitions per side (n), the estimate with its 95 % interval and how the interval was
made (`analysis.evidence`).  No cell shows a raw dictionary or JSON.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from analysis.claim_runs import rests_on, study_verdicts
from analysis.claims import Claim, StudyResult, StudyTable, load_paper, paper_id
from analysis.evidence import FAILS, HOLDS, INCONCLUSIVE, Estimate
from analysis.report_fidelity import fidelity_banner
from analysis.study_figures import StudyFigure, write_figures
from analysis.study_registry import Evaluator, StudyRegistry
from analysis.study_text import measured_text, number, ratio_text, verdict_sentence
from testbed.core import safefiles
from testbed.core.errors import InputError
from testbed.core.safefiles import atomic_write_text


def _paper_and_evaluator(study: Path, registry: StudyRegistry
                         ) -> tuple[dict[str, Any], Evaluator]:
    """The study's paper.toml and the ``evaluate`` of the study its id names; `InputError`
    (one line) for a paper.toml that is absent, a link, not TOML, or names no study."""
    paper = load_paper(study)
    sid = paper_id(paper)
    fn = registry.evaluator(sid)
    if fn is None:
        raise InputError(f"{study}/paper.toml: paper.id {sid!r} is not one of "
                         f"{', '.join(registry.ids())}")
    return paper, fn


def check_paper(study: Path, registry: StudyRegistry | None = None) -> dict[str, Any]:
    """The study's paper.toml, refused as the report would refuse it
    (`_paper_and_evaluator`).  `testbed study` asks this before anything runs, not after
    the last run."""
    return _paper_and_evaluator(study, registry or StudyRegistry())[0]


def evaluate(study: Path, out: Path, registry: StudyRegistry | None = None) -> StudyResult:
    """Paper-vs-ours comparisons and claims for a study's results in out.

    study: the study folder (only its paper.toml is read); out: what ``testbed study``
    wrote; registry: where the studies' code is found (default: the project's
    ``experiments/``).
    """
    paper, fn = _paper_and_evaluator(study, registry or StudyRegistry())
    sid = paper_id(paper)
    res = StudyResult(study=sid or study.name, title=(paper.get("paper") or {}).get("title", ""))
    if out.is_dir():
        fn(paper, out, res)
        res.verdicts, res.skipped = study_verdicts(out)  # read once: claims and banner
        for c in res.claims:
            c.runs = rests_on(res.verdicts, c.specs)
    return res


def render(res: StudyResult, paper: dict[str, Any], out: Path,
           figures: list[tuple[StudyFigure, str]] | None = None) -> str:
    """The study report as one HTML page.

    figures: the redrawn figures with their hrefs relative to out (`write_figures`).
    """
    e = html.escape
    rows = "".join(_claim_row(c) for c in res.claims)
    comps = "".join(
        f"<tr><td>{e(c.figure)}</td><td>{e(c.quantity)}</td><td>{number(c.paper)}</td>"
        f"<td>{number(c.ours)}</td><td>{ratio_text(c.paper, c.ours)}</td>"
        f"<td>{e(c.unit)}</td><td>{e(c.note)}</td></tr>"
        for c in res.comparisons)
    figs = "".join(
        f"<li><b>{e(f.get('source', k))}</b> — {e(f.get('title', ''))}<br>"
        f"<i>{e(str(f.get('claim', '')).strip())}</i></li>"
        for k, f in (paper.get("figures") or {}).items())
    links = "".join(f'<li><a href="{e(href)}">{e(p.name)}</a></li>'
                    for p in sorted(out.iterdir())
                    if safefiles.file_in(out, f"{p.name}/report.html") is not None
                    and (href := safefiles.safe_href(f"{p.name}/report.html")) is not None)
    missing = (f"<p class=bad>No complete runs for: {e(', '.join(res.missing))}</p>"
               if res.missing else "")
    setup = e(str((paper.get("paper") or {}).get("setup", "")))
    banner = _fidelity_banner(res)
    drawn = "".join(
        f'<figure id="{e(f.name)}"><h3>{e(f.title)}</h3><img src="{e(href)}" '
        f'alt="{e(f.title)}"><figcaption>{e(f.caption)}</figcaption></figure>'
        for f, href in (figures or []))
    tables = "".join(_study_table(t) for t in res.tables)
    return f"""<!doctype html><html><head><meta charset="utf-8">
<title>{e(res.study)}: {e(res.title)}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px}}
figure{{margin:1.5em 0}}figure img{{max-width:100%}}figcaption{{color:#444}}
.ok{{background:#dfd}}.bad{{background:#fdd}}.na{{background:#eee}}.warn{{background:#ffe9b3}}
.fid{{padding:8px 12px;border-radius:4px;margin:1em 0;border:1px solid}}
.fid-ok{{background:#eaf6ea;border-color:#7b7}}.fid-warn,.fid-unknown{{background:#fff6e0;
border-color:#d90}}.fid-fail{{background:#fde8e8;border-color:#c44}}</style></head><body>
<h1>{e(res.study)}: {e(res.title)}</h1>{banner}
<p>{setup}</p>{missing}
<h2>The paper's claims, on our runs</h2>
<p>A claim <b>holds</b> when the 95 % interval of what it rests on lies wholly on its
side, <b>does not hold</b> when it lies wholly on the other, and is <b>inconclusive</b>
when it contains 0 (the line) -- or, on one repetition (no interval), when the difference
is under 10 %.  n: repetitions per side.  The last column counts the runs of the specs
a claim is read from by their fidelity verdict: a verdict resting on runs that did not
keep up says so there (the verdict itself is what the numbers say).</p>
<table><tr><th>figure</th><th>claim</th><th>verdict</th><th>n</th><th>estimate [95 % CI]
</th><th>how</th><th>measured</th><th>runs it rests on (fidelity)</th></tr>{rows}</table>
<h2>The paper's figures, redrawn from our runs</h2>
<p>Our runs in colour; the paper's stated values in black dashed lines or crosses,
labelled "paper".  Where the paper gives only a curve, nothing of it is drawn.</p>
{drawn or "<p class=na>No figures: no runs to draw from.</p>"}{tables}
<h2>Paper vs ours</h2>
<table><tr><th>figure</th><th>quantity</th><th>paper</th><th>ours</th>
<th>ours / paper</th><th>unit</th><th>note</th></tr>{comps}</table>
<h2>What the paper shows</h2><ul>{figs}</ul>
<h2>Per-spec reports</h2><ul>{links}</ul>
</body></html>"""


_CLASS = {HOLDS: "ok", FAILS: "bad", INCONCLUSIVE: "warn"}


def _estimate(e: Estimate) -> str:
    """An estimate as text: value [low, high] (or the value alone on one repetition)."""
    ci = "" if e.low is None or e.high is None else f" [{number(e.low)}, {number(e.high)}]"
    line = "" if e.line is None else f" (line {number(e.line)})"
    return f"{e.quantity}: {number(e.value)}{ci}{line}"


def _claim_row(c: Claim) -> str:
    """One claim as a table row: its verdict in words, a line per part of its evidence."""
    e = html.escape
    parts = c.evidence
    return (f"<tr><td>{e(c.figure)}</td><td>{e(c.text)}</td>"
            f"<td class={_CLASS.get(c.verdict, 'na')}><b>{e(c.verdict)}</b><br>"
            f"{e(verdict_sentence(c))}</td>"
            f"<td>{'<br>'.join(e(' / '.join(map(str, p.n))) for p in parts)}</td>"
            f"<td>{'<br>'.join(e(_estimate(p)) for p in parts)}</td>"
            f"<td>{'<br>'.join(e(f'{p.method}: {p.verdict}') for p in parts)}</td>"
            f"<td>{e(measured_text(c.measured))}</td>{_runs_cell(c)}</tr>")


_RUNS_CLASS = {"ok": "ok", "warn": "warn", "fail": "bad"}


def _runs_cell(c: Claim) -> str:
    """The runs a claim rests on and how many kept up (`analysis.claim_runs`)."""
    if c.runs is None:
        return "<td class=na>not known</td>"
    return (f"<td class={_RUNS_CLASS.get(c.runs.worst, 'na')}>"
            f"{html.escape(c.runs.text())}</td>")


def _study_table(t: StudyTable) -> str:
    """A study's own table (`StudyTable`) as HTML."""
    e = html.escape
    head = "".join(f"<th>{e(c)}</th>" for c in t.columns)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in t.rows)
    note = f"<p>{e(t.note)}</p>" if t.note else ""
    return f"<h3>{e(t.title)}</h3><table><tr>{head}</tr>{body}</table>{note}"


def _fidelity_banner(res: StudyResult) -> str:
    """The fidelity verdicts of every run of the study (each spec folder's bundles)."""
    notes = "".join(f"<p class=na>{html.escape(w)}</p>" for w in res.skipped)
    return fidelity_banner([(f"{spec}/{run}", v, why) for spec, rows in res.verdicts.items()
                            for run, v, why in rows]) + notes


def write_study_report(study: Path, out: Path, registry: StudyRegistry | None = None) -> Path:
    """Write out/report.html (paper vs ours), its figures (out/report-figures/) and
    out/claims.json; return the report path.

    study: the study folder; out: its results; registry: as for `evaluate`.
    """
    registry = registry or StudyRegistry()
    res = evaluate(study, out, registry)
    paper = load_paper(study)
    out.mkdir(parents=True, exist_ok=True)
    maker = registry.figure_maker(paper_id(paper))
    figures = write_figures(maker(paper, out), out) if maker is not None else []
    target = out / "report.html"
    atomic_write_text(target, render(res, paper, out, figures))
    claims = [c.record() for c in res.claims]
    atomic_write_text(out / "claims.json", json.dumps(claims, indent=1))
    return target
