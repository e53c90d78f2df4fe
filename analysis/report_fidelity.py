"""The fidelity banner at the top of a report: did the emulation keep up during the runs?

`fidelity_banner` turns (run, verdict, reasons) triples into one coloured box; the run
report reads the run's ``metadata.json`` (`run_fidelity_section`), the sweep report each
run's row of ``summary.parquet`` (`sweep_fidelity_section`), and the study report
(`analysis.study_report`) every spec's summary.  docs/fidelity.md says how each check is
made.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from analysis.report_context import ReportContext, esc

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
    items = "".join(f"<li><b>{esc(run)}</b>: {esc(r)}</li>" for run, v, reasons in verdicts
                    if v != "ok" for r in reasons[:6])
    return (f"<div class='fid fid-{esc(worst)}' id='fidelity'><b>Fidelity: {esc(head)}</b>"
            f" &mdash; {esc(_VERDICT_TEXT.get(worst, ''))} "
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
    if "status" in s:  # a broken run's files are not as it wrote them: its verdict neither
        broken = s["status"] == "broken"
        verdict = verdict.where(~broken, "unknown")
        reasons = reasons.where(~broken, "the run is broken (testbed query DIR names why)")
    return fidelity_banner([(str(r), str(v) if isinstance(v, str) else "unknown",
                             str(x).split("; ") if isinstance(x, str) and x else [])
                            for r, v, x in zip(s.get("run_id", s.index), verdict, reasons,
                                               strict=True)])
