"""A study claim names the runs it rests on and how many of them kept up
(`analysis.claim_runs`): in claims.json and in the study report's claims table."""

from __future__ import annotations

import json
from pathlib import Path

from analysis.claim_runs import rests_on, study_verdicts
from analysis.claims import Claim
from analysis.evidence import level
from analysis.study_report import _claim_row
from testbed.results.bundle import Bundle


def _run(spec: Path, run_id: str, verdict: str | None, reasons: list[str] | None = None,
         status: str = "complete") -> None:
    run = spec / run_id
    run.mkdir(parents=True)
    meta: dict = {"run_id": run_id, "status": status, "files": {}}
    if verdict is not None:
        meta["fidelity"] = {"verdict": verdict, "reasons": reasons or []}
    (run / "metadata.json").write_text(json.dumps(meta))
    for name in Bundle.required(meta):  # the files a complete run has (else: broken)
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text("")
    (spec / "summary.parquet").write_bytes(b"")  # the report rebuilds it from the bundles


def _study(tmp_path: Path) -> Path:
    out = tmp_path / "study"
    _run(out / "paths", "p-r1", "ok")
    _run(out / "paths", "p-r2", "ok")
    _run(out / "loss", "l-r1", "ok")
    _run(out / "loss", "l-r2", "warn", ["warn: a warm-up ping was lost"])
    _run(out / "loss", "l-r3", "fail", ["the link carried 1.6 x its rate", "second"])
    _run(out / "outage", "o-r1", None)  # made before the checks
    _run(out / "outage", "o-r2", "ok", status="broken")
    return out


def test_counts_per_verdict_and_the_others_named(tmp_path: Path) -> None:
    verdicts, skipped = study_verdicts(_study(tmp_path))
    assert skipped == []
    assert sorted(verdicts) == ["loss", "outage", "paths"]

    ok = rests_on(verdicts, ["paths"])
    assert (ok.runs, ok.worst, ok.not_ok) == (2, "ok", [])
    assert ok.text() == "2 runs of paths: all ok"

    bad = rests_on(verdicts, ["loss"])
    assert bad.counts == {"ok": 1, "warn": 1, "fail": 1} and bad.worst == "fail"
    assert bad.not_ok == ["loss/l-r2: warn: a warm-up ping was lost",
                          "loss/l-r3: fail (the link carried 1.6 x its rate)"]
    assert bad.text().startswith("3 runs of loss: 1 ok, 1 warn, 1 fail -- the verdict rests "
                                 "on runs whose numbers are not to be trusted; loss/l-r2")
    rec = bad.record()
    assert (rec["count"], rec["ok"], rec["warn"], rec["fail"], rec["worst"]) == \
        (3, 1, 1, 1, "fail")

    # no verdict yet, and a broken run (whatever it once said): unknown
    unknown = rests_on(verdicts, ["outage"])
    assert unknown.counts == {"unknown": 2} and unknown.worst == "unknown"
    assert "the run is broken" in unknown.text()

    one = rests_on({"x": [("x-r1", "ok", [])]}, ["x"])
    assert one.text() == "1 run of x: ok"
    both = rests_on(verdicts, ["paths", "nothing"])
    assert both.runs == 2 and both.absent == ["nothing"]
    none = rests_on(verdicts, [])
    assert (none.runs, none.worst, none.text()) == (0, "unknown", "no runs of no spec named")


def test_a_linked_spec_folder_is_named_not_read(tmp_path: Path) -> None:
    out = _study(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    _run(elsewhere, "x-r1", "fail")
    (out / "linked").symlink_to(elsewhere)
    verdicts, skipped = study_verdicts(out)
    assert "linked" not in verdicts
    assert skipped == [f"skipped {out / 'linked'}: a symbolic link (not followed)"]


def test_the_claims_row_and_record_show_the_runs(tmp_path: Path) -> None:
    verdicts, _ = study_verdicts(_study(tmp_path))
    claim = Claim("ping table", "loss shows", [level("lost, %", [19.0, 18.0, 20.0], 5.0,
                                                     above=True)], specs=("loss",))
    claim.runs = rests_on(verdicts, claim.specs)
    row = _claim_row(claim)
    assert "<td class=bad>3 runs of loss: 1 ok, 1 warn, 1 fail" in row
    assert claim.verdict == "holds"  # the verdict is what the numbers say; the cell warns
    assert claim.record()["runs"]["not_ok"][1].startswith("loss/l-r3: fail")
    plain = Claim("x", "y", [])
    assert "<td class=na>not known</td>" in _claim_row(plain)
    assert plain.record()["runs"] is None
