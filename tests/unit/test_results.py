"""Bundles, atomic files, resume, failures, interruption and the summary (fake runner)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pandas as pd
import pytest

from testbed.core.errors import InputError, MissingFeatureError, RunError
from testbed.core.safefiles import atomic_write_json, atomic_write_text
from testbed.results.bundle import (
    ALWAYS_REQUIRED,
    COMPLETE,
    FAILED,
    INTERRUPTED,
    Bundle,
    locked,
)
from testbed.results.summary import runs_frame
from testbed.run.sweep import finish_deferred, pending_analysis, run_sweep
from testbed.spec.sweep import expand

SPEC = {
    "name": "fake", "duration": "5s", "repetitions": 2,
    "topology": {"kind": "multipath", "paths": [{"name": "a", "bw": "10Mbit"},
                                                 {"name": "b", "bw": "10Mbit"}]},
    "workload": [{"kind": "bulk", "src": "client", "dst": "server", "size": "1MB"}],
    "sweep": {"topology.paths.1.bw": ["2Mbit", "4Mbit"]},
}


def plans():
    return expand(copy.deepcopy(SPEC), "fake.toml")


class FakeRunner:
    """Writes the files a real run writes; can fail or be interrupted on chosen runs."""

    def __init__(self, fail=(), interrupt=(), missing=(), error=RunError, defer=False):
        self.defer = defer  # leave the analysis for later (execute_run(analyze=False))
        self.calls: list[str] = []
        self.keepers: list = []  # the NetworkKeeper each run was given (None: none)
        self.fail, self.interrupt, self.missing, self.error = fail, interrupt, missing, error

    def __call__(self, plan, bundle: Bundle, meta, phase, keeper=None):
        self.calls.append(plan.run_id)
        self.keepers.append(keeper)
        phase("set-up")
        meta["kernel"] = "fake"
        meta["timing"] = {"set-up": 1.5, "teardown": 0.5, "done": 0.0}
        atomic_write_text(bundle.transcript_path, "{}\n")
        (bundle.pcap_dir / "client-eth0.pcap").write_bytes(b"\0" * 24)
        if plan.index in self.interrupt:
            raise KeyboardInterrupt
        if plan.index in self.fail:
            raise self.error("controller died")
        if self.defer:
            meta["analysis"] = "deferred"
            return {}
        for rel in ALWAYS_REQUIRED:
            if rel.startswith("metrics/") and plan.index not in self.missing:
                pd.DataFrame({"flow_id": [1], "bytes": [1000 * (plan.index + 1)],
                              "throughput_bps": [1e6 * (plan.index + 1)]}).to_parquet(
                    bundle.root / rel)
        return {"goodput_bps": 1e6 * (plan.index + 1)}


def statuses(out: Path) -> dict[str, str]:
    return {p.run_id: Bundle(out / p.run_id).status() for p in plans()}


def test_atomic_write_leaves_no_temp_files(tmp_path):
    atomic_write_json(tmp_path / "m.json", {"a": 1})
    atomic_write_text(tmp_path / "m.json", "{\"a\": 2}")
    assert json.loads((tmp_path / "m.json").read_text()) == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_a_sweep_writes_complete_bundles_and_a_summary(tmp_path):
    fake = FakeRunner()
    report = run_sweep(plans(), tmp_path, fake, extra_meta={"command": "x"})
    assert report.complete == 4 and report.skipped == 0 and not report.failed
    assert set(statuses(tmp_path).values()) == {COMPLETE}
    b = Bundle(tmp_path / plans()[0].run_id)
    meta = b.read_metadata()
    assert meta["status"] == COMPLETE and meta["kernel"] == "fake" and meta["command"] == "x"
    assert meta["params"] == {"topology.paths.1.bw": "2Mbit"}
    assert "metrics/flows.parquet" in meta["files"] and "spec.toml" in meta["files"]
    assert b.spec_path.read_text().startswith("# run ")
    summary = pd.read_parquet(tmp_path / "summary.parquet")
    assert len(summary) == 4
    assert set(summary["status"]) == {COMPLETE}
    assert sorted(summary["topology.paths.1.bw"]) == ["2Mbit", "2Mbit", "4Mbit", "4Mbit"]
    assert "goodput_bps" in summary.columns
    assert list(summary["setup_s"]) == [1.5] * 4 and "done_s" not in summary.columns


def test_resume_skips_complete_runs(tmp_path):
    run_sweep(plans(), tmp_path, FakeRunner())
    again = FakeRunner()
    report = run_sweep(plans(), tmp_path, again)
    assert again.calls == [] and report.skipped == 4


def test_interrupt_keeps_finished_runs_and_resume_redoes_only_the_rest(tmp_path):
    first = FakeRunner(interrupt={1})
    with pytest.raises(KeyboardInterrupt):
        run_sweep(plans(), tmp_path, first)
    ids = [p.run_id for p in plans()]
    assert first.calls == ids[:2]
    st = statuses(tmp_path)
    assert st[ids[0]] == COMPLETE and st[ids[1]] == INTERRUPTED and st[ids[2]] == "missing"
    assert len(pd.read_parquet(tmp_path / "summary.parquet")) == 2
    done_meta = (tmp_path / ids[0] / "metadata.json").read_text()

    second = FakeRunner()
    report = run_sweep(plans(), tmp_path, second)
    assert second.calls == ids[1:]
    assert report.skipped == 1 and report.complete == 3
    assert (tmp_path / ids[0] / "metadata.json").read_text() == done_meta
    moved = list((tmp_path / "_attempts" / ids[1]).iterdir())
    assert [m.name for m in moved] == ["1-interrupted"]
    assert len(pd.read_parquet(tmp_path / "summary.parquet")) == 4


def test_a_failed_run_is_recorded_and_the_sweep_goes_on(tmp_path):
    fake = FakeRunner(fail={0})
    report = run_sweep(plans(), tmp_path, fake)
    assert len(fake.calls) == 4
    assert report.complete == 3 and report.failed[0][1] == "controller died"
    b = Bundle(tmp_path / plans()[0].run_id)
    assert b.status() == FAILED
    assert b.read_metadata()["error"] == "controller died"
    assert "RunError" in (b.logs_dir / "error.log").read_text()
    summary = pd.read_parquet(tmp_path / "summary.parquet")
    assert list(summary.sort_values("run_id")["status"]).count(FAILED) == 1


def test_fail_fast_stops_at_the_first_failure(tmp_path):
    fake = FakeRunner(fail={1})
    with pytest.raises(RunError):
        run_sweep(plans(), tmp_path, fake, fail_fast=True)
    assert len(fake.calls) == 2
    assert statuses(tmp_path)[plans()[0].run_id] == COMPLETE


def test_a_missing_feature_stops_the_sweep(tmp_path):
    fake = FakeRunner(fail={0}, error=MissingFeatureError)
    with pytest.raises(MissingFeatureError):
        run_sweep(plans(), tmp_path, fake)
    assert len(fake.calls) == 1


def test_unexpected_exceptions_are_recorded(tmp_path):
    fake = FakeRunner(fail={0}, error=ValueError)
    report = run_sweep(plans(), tmp_path, fake)
    assert report.failed[0][1] == "ValueError: controller died"


def test_a_run_without_its_metrics_is_not_complete(tmp_path):
    fake = FakeRunner(missing={2})
    report = run_sweep(plans(), tmp_path, fake)
    assert report.complete == 3
    bad = Bundle(tmp_path / plans()[2].run_id)
    assert bad.status() == FAILED and "metrics/flows.parquet" in bad.read_metadata()["error"]


def test_a_damaged_complete_bundle_is_redone(tmp_path):
    run_sweep(plans(), tmp_path, FakeRunner())
    target = tmp_path / plans()[3].run_id / "pcap" / "client-eth0.pcap"
    target.write_bytes(b"\0" * 10)  # truncated after the fact
    assert Bundle(target.parent.parent).status() == "broken"
    again = FakeRunner()
    run_sweep(plans(), tmp_path, again)
    assert again.calls == [plans()[3].run_id]
    assert (tmp_path / "_attempts" / plans()[3].run_id / "1-broken").is_dir()


def test_a_bundle_left_running_is_redone(tmp_path):
    run_sweep(plans(), tmp_path, FakeRunner())
    b = Bundle(tmp_path / plans()[0].run_id)
    meta = b.read_metadata()
    meta["status"] = "running"  # as if the machine died mid-run
    b.write_metadata(meta)
    again = FakeRunner()
    run_sweep(plans(), tmp_path, again)
    assert again.calls == [plans()[0].run_id]


def test_sigterm_inside_a_run_marks_it_interrupted(tmp_path):
    class Terminated(FakeRunner):
        def __call__(self, plan, bundle, meta, phase):
            raise SystemExit(143)

    with pytest.raises(SystemExit):
        run_sweep(plans(), tmp_path, Terminated())
    assert statuses(tmp_path)[plans()[0].run_id] == INTERRUPTED


def test_an_interrupt_before_the_run_starts_still_marks_it(tmp_path, monkeypatch):
    import testbed.run.sweep as R

    real = R.atomic_write_text
    calls = []

    def flaky(path, text):
        calls.append(path)
        if len(calls) == 1:  # Ctrl-C while spec.toml is written
            raise KeyboardInterrupt
        real(path, text)

    monkeypatch.setattr(R, "atomic_write_text", flaky)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(plans(), tmp_path, FakeRunner())
    assert statuses(tmp_path)[plans()[0].run_id] == INTERRUPTED


def test_a_run_left_running_is_recovered_before_it_is_redone(tmp_path):
    run_sweep(plans()[:1], tmp_path, FakeRunner())
    b = Bundle(tmp_path / plans()[0].run_id)
    meta = b.read_metadata()
    meta["status"] = "running"
    b.write_metadata(meta)
    seen = []
    run_sweep(plans()[:2], tmp_path, FakeRunner(), recover=lambda bundle: seen.append(
        bundle.run_id))
    assert seen == [plans()[0].run_id]


def test_two_sweeps_cannot_share_a_directory(tmp_path):
    with locked(tmp_path), pytest.raises(InputError, match="another `testbed run`"):
        run_sweep(plans(), tmp_path, FakeRunner())


def test_progress_is_told_everything(tmp_path):
    events = []

    class Rec:
        def start(self, total, skipped):
            events.append(("start", total, skipped))

        def begin(self, index, run_id):
            events.append(("begin", index))

        def phase(self, text):
            events.append(("phase", text))

        def end(self, run_id, status, wall_s, error):
            events.append(("end", status))

        def close(self):
            events.append(("close",))

    run_sweep(plans()[:1], tmp_path, FakeRunner(), progress=Rec())
    assert events == [("start", 1, 0), ("begin", 0), ("phase", "set-up"), ("end", COMPLETE),
                      ("close",)]


def test_runs_frame_of_an_empty_dir(tmp_path):
    df = runs_frame(tmp_path)
    assert len(df) == 0 and "run_id" in df.columns


def fake_analyze(run_dir: Path) -> dict:
    """What `testbed.run.execute.analyze_run` does: metrics/ written, headline returned."""
    if (run_dir / "pcap" / "corrupt").exists():
        raise RunError("capture is corrupt")
    (run_dir / "metrics").mkdir(exist_ok=True)
    for rel in ALWAYS_REQUIRED:
        if rel.startswith("metrics/"):
            pd.DataFrame({"flow_id": [1]}).to_parquet(run_dir / rel)
    return {"goodput_bps": 5e6}


def test_a_run_with_deferred_analysis_is_complete_and_finished_later(tmp_path):
    report = run_sweep(plans(), tmp_path, FakeRunner(defer=True))
    assert report.complete == 4 and not report.failed
    assert set(statuses(tmp_path).values()) == {COMPLETE}  # no metrics/ needed yet
    assert len(pending_analysis(tmp_path)) == 4
    again = FakeRunner()
    run_sweep(plans(), tmp_path, again)  # a resume does not redo them
    assert again.calls == []
    (tmp_path / plans()[1].run_id / "pcap" / "corrupt").write_text("x")
    lines: list[str] = []
    failed = finish_deferred(tmp_path, fake_analyze, progress=lines.append)
    assert [r for r, _ in failed] == [plans()[1].run_id]
    assert "capture is corrupt" in failed[0][1] and len(lines) == 4
    st = statuses(tmp_path)
    assert st.pop(plans()[1].run_id) == FAILED and set(st.values()) == {COMPLETE}
    meta = Bundle(tmp_path / plans()[0].run_id).read_metadata()
    assert meta["analysis"] == "host" and meta["headline"] == {"goodput_bps": 5e6}
    assert "metrics/flows.parquet" in meta["files"] and "analysis" in meta["timing"]
    bad = Bundle(tmp_path / plans()[1].run_id)
    assert (bad.logs_dir / "error.log").exists()
    summary = pd.read_parquet(tmp_path / "summary.parquet").set_index("run_id")
    assert summary.loc[plans()[0].run_id, "goodput_bps"] == 5e6
    assert summary.loc[plans()[1].run_id, "status"] == FAILED
    assert pending_analysis(tmp_path) == []
    assert finish_deferred(tmp_path, fake_analyze) == []  # nothing left to do
    rerun = FakeRunner()
    run_sweep(plans(), tmp_path, rerun)  # the failed one is redone, the rest kept
    assert rerun.calls == [plans()[1].run_id]


def test_a_deferred_run_still_needs_its_run_files(tmp_path):
    run_sweep(plans(), tmp_path, FakeRunner(defer=True))
    (tmp_path / plans()[0].run_id / "transcript.jsonl").unlink()
    assert Bundle(tmp_path / plans()[0].run_id).status() == "broken"
    assert len(pending_analysis(tmp_path)) == 3
