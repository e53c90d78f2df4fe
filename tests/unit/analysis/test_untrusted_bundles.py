"""Bundles from someone else: no symbolic link followed, no file written outside the report
folder, no parameter replacing a run's identity, no glob in a query, no unsafe link."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
from test_bundle_report import _run_dir, _sweep
from typer.testing import CliRunner

from analysis import report, study_report
from analysis.bundle import analyze_bundle
from analysis.claims import StudyResult
from analysis.report_context import figure_file_name
from analysis.study_tables import run_table
from testbed.cli.app import app
from testbed.core import safefiles
from testbed.core.errors import InputError
from testbed.results.bundle import LOCK, Bundle, locked
from testbed.results.query import run_query
from testbed.results.summary import run_row, runs_frame


def _complete_bundle(out, run_id, nbytes, params=None):
    """A bundle that `Bundle.status` calls complete, with a one-row flows table."""
    root = out / run_id
    (root / "metrics").mkdir(parents=True)
    (root / "spec.toml").write_text('name = "x"\n')
    (root / "transcript.jsonl").write_text("{}\n")
    for t in ("flows", "timeseries", "cwnd", "ping", "events"):
        pd.DataFrame({"bytes": [nbytes]}).to_parquet(root / "metrics" / f"{t}.parquet")
    b = Bundle(root)
    meta = {"status": "complete", "params": params or {}, "headline": {}}
    meta["files"] = b.manifest()
    b.write_metadata(meta)
    return b


# -- the run lock ------------------------------------------------------------------------

def test_lock_symlink_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK).symlink_to(victim)
    with pytest.raises(InputError, match="not a regular file"), locked(out):
        pass
    assert victim.read_text() == "precious"


def test_lock_hard_link_is_refused(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    os.link(victim, out / LOCK)
    with pytest.raises(InputError, match="single link"), locked(out):
        pass
    assert victim.read_text() == "precious"


def test_lock_is_created_and_reused(tmp_path):
    with locked(tmp_path):
        assert (tmp_path / LOCK).read_text() == str(os.getpid())
    with locked(tmp_path):
        pass


def test_report_and_query_create_no_lock_in_a_bundle(tmp_path):
    run = _run_dir(tmp_path)
    report.write_report(run)
    out = tmp_path / "out"
    _complete_bundle(out, "r1", 1)
    run_query(out, "SELECT * FROM flows")
    runs_frame(out)
    assert not (run / LOCK).exists() and not (out / LOCK).exists()
    assert not (out / "r1" / LOCK).exists()


# -- symbolic links inside bundles ------------------------------------------------------

def test_report_skips_linked_spec_and_metrics_with_a_warning(tmp_path):
    secret = tmp_path / "secret.toml"
    secret.write_text('password = "hunter2"\n')
    run = _run_dir(tmp_path)
    (run / "spec.toml").unlink()
    (run / "spec.toml").symlink_to(secret)
    analyze_bundle(run)
    (run / "metrics" / "cwnd.parquet").unlink()
    (run / "metrics" / "cwnd.parquet").symlink_to(run / "metrics" / "flows.parquet")
    warnings: list[str] = []
    page = report.write_report(run, warnings=warnings).read_text()
    assert "hunter2" not in page
    assert any("spec.toml: a symbolic link" in w for w in warnings)
    assert any("cwnd.parquet: a symbolic link" in w for w in warnings)
    assert "spec.toml: a symbolic link (not followed)" in page


def test_linked_figures_folder_is_not_written_through(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = _run_dir(tmp_path)
    (run / "figures").symlink_to(elsewhere)
    page = report.write_report(run).read_text()
    assert list(elsewhere.iterdir()) == []
    assert "figures not saved" in page


def test_linked_metrics_folder_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = _run_dir(tmp_path)
    (run / "metrics").symlink_to(elsewhere)
    r = CliRunner().invoke(app, ["report", str(run)])
    assert r.exit_code == 2 and "symbolic link" in r.output
    assert list(elsewhere.iterdir()) == []


def test_linked_capture_and_samples_are_skipped(tmp_path):
    run = _run_dir(tmp_path)
    (run / "pcap" / "x-x-eth0.pcap").symlink_to("/dev/zero")
    (run / "samples" / "ping.jsonl").symlink_to(tmp_path / "nothing.jsonl")
    warnings: list[str] = []
    head = analyze_bundle(run, warnings=warnings)
    assert head["captures"] == 1
    assert any("x-x-eth0.pcap: a symbolic link" in w for w in warnings)
    assert any("ping.jsonl: a symbolic link" in w for w in warnings)


def test_cli_report_prints_a_warning_line_per_skipped_file(tmp_path):
    run = _run_dir(tmp_path)
    (run / "spec.toml").unlink()
    (run / "spec.toml").symlink_to("/etc/hostname")
    r = CliRunner().invoke(app, ["report", str(run)])
    assert r.exit_code == 0, r.output
    assert f"warning: skipped {run / 'spec.toml'}: a symbolic link (not followed)" in r.output


def test_read_bytes_refuses_links_and_fifos(tmp_path):
    (tmp_path / "l").symlink_to("/etc/hostname")
    os.mkfifo(tmp_path / "f")
    for name in ("l", "f"):
        with pytest.raises(safefiles.UnsafeFileError):
            safefiles.read_bytes(tmp_path / name)
    assert safefiles.check(tmp_path, tmp_path / "f") == "not a regular file"


# -- figure names from spec keys --------------------------------------------------------

def test_figure_names_from_keys_stay_in_the_figures_folder(tmp_path):
    d = _sweep(tmp_path)
    for m in d.glob("*/metadata.json"):  # the swept key, as a crafted bundle names it
        meta = json.loads(m.read_text())
        meta["params"]["../../../escaped"] = meta["params"].pop("transport.cc")
        m.write_text(json.dumps(meta))
    report.write_report(d)
    assert not list(tmp_path.glob("escaped*")) and not list(d.glob("escaped*"))
    names = [p.name for p in (d / "figures").iterdir()]
    assert names and all("/" not in n and not n.startswith(".") for n in names)
    assert [n for n in names if "escaped" in n]  # drawn, inside the folder
    assert figure_file_name("../../x") == "x"
    assert figure_file_name("a.b/c") == "a_b_c"


# -- parameters cannot replace identity columns ----------------------------------------

def test_params_cannot_overwrite_status_or_run_id(tmp_path):
    b = _complete_bundle(tmp_path, "real-id", 1,
                         params={"status": "complete", "run_id": "fake", "transport.cc": "reno"})
    meta = b.read_metadata()
    meta["status"] = "failed"
    b.write_metadata(meta)
    row = run_row(b)
    assert row["run_id"] == "real-id" and row["status"] == "failed"
    assert row["param:status"] == "complete" and row["param:run_id"] == "fake"
    assert row["transport.cc"] == "reno"


def test_params_cannot_overwrite_the_fidelity_columns(tmp_path):
    b = _complete_bundle(tmp_path, "r1", 1,
                         params={"fidelity": "ok", "fidelity_first_rtt_ms": 0.1})
    meta = b.read_metadata()
    meta["fidelity"] = {"verdict": "fail", "reasons": ["fail: slow"],
                        "checks": {"first_rtt_ms": 250.0}}
    b.write_metadata(meta)
    row = run_row(b)
    assert row["fidelity"] == "fail" and row["fidelity_first_rtt_ms"] == 250.0
    assert row["param:fidelity"] == "ok" and row["param:fidelity_first_rtt_ms"] == 0.1


def test_a_crafted_fidelity_section_is_no_traceback(tmp_path):
    b = _complete_bundle(tmp_path, "r1", 1)
    meta = b.read_metadata()
    meta["fidelity"] = {"verdict": ["x"], "reasons": "not a list",
                        "checks": {"first_rtt_ms": "lots", "softnet_dropped": [1]}}
    b.write_metadata(meta)
    row = run_row(b)
    assert row["fidelity_reasons"] is None and row["fidelity_first_rtt_ms"] is None
    assert row["fidelity_softnet_dropped"] is None
    meta["fidelity"] = ["not", "a", "table"]
    b.write_metadata(meta)
    assert run_row(b)["fidelity"] == "unknown"


def test_a_linked_metadata_json_says_why_it_was_not_read(tmp_path):
    _complete_bundle(tmp_path / "elsewhere", "r2", 2)
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "metadata.json").symlink_to(tmp_path / "elsewhere/r2/metadata.json")
    b = Bundle(tmp_path / "r1")
    assert b.load_metadata() == (None, safefiles.SYMLINK)
    assert b.status() == "broken"


def test_report_out_refuses_a_run_whose_flows_table_is_a_link(tmp_path):
    run = _run_dir(tmp_path)
    (run / "metrics").mkdir()
    (run / "metrics" / "flows.parquet").symlink_to("/etc/hostname")
    before = sorted(p.name for p in run.rglob("*"))
    with pytest.raises(InputError, match=r"not analysed yet \(metrics/flows\.parquet is a "
                                         r"symbolic link"):
        report.write_report(run, out=tmp_path / "r.html")
    assert sorted(p.name for p in run.rglob("*")) == before
    assert not (tmp_path / "r.html").exists()


def test_report_does_not_analyse_again_a_run_whose_record_lists_its_metrics(tmp_path):
    """A run that was analysed and then lost ``metrics/flows.parquet`` (or has a FIFO or
    a link there) was analysed again by ``testbed report``: every table rewritten from its
    captures, whatever they held by now, without a look at its sha256 manifest."""
    from realruns import TCP_RUN, finished_copy

    run = finished_copy(tmp_path / "src", analyze_bundle) / TCP_RUN
    meta = json.loads((run / "metadata.json").read_text())
    assert "metrics/flows.parquet" in meta["files"]
    (run / "metrics" / "flows.parquet").unlink()
    os.mkfifo(run / "metrics" / "flows.parquet")
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size)
              for p in sorted((run / "metrics").iterdir()) if p.is_file()}
    page = report.write_report(run)
    html = page.read_text()
    assert {p: (p.stat().st_mtime_ns, p.stat().st_size)
            for p in sorted((run / "metrics").iterdir()) if p.is_file()} == before
    assert (run / "metrics" / "flows.parquet").is_fifo()
    assert "not analysed again here" in html and "verify --update" in html
    assert "broken" in html


def _tree(root):
    return {p: p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("inside", ["metadata.json", "report.html", "sub/r.html"])
def test_report_out_inside_the_folder_it_reads_is_refused(tmp_path, inside):
    """With --out, DIR is only read; `--out DIR/metadata.json` replaced the run's own
    metadata with the page, and figures went into DIR.  Refused, nothing written."""
    run = _run_dir(tmp_path)
    analyze_bundle(run)
    (run / "sub").mkdir()
    before = _tree(run)
    with pytest.raises(InputError, match=r"--out .*: inside .*only reads; choose a file "
                                         "outside it"):
        report.write_report(run, out=run / inside)
    assert _tree(run) == before


def test_report_out_does_not_follow_a_link_at_its_figures_folder(tmp_path):
    """`--out o/f.html` saves figures in o/f-figures/; a link planted there took them
    wherever it pointed.  The page is written (figures embedded) and the figures are not
    saved, with a warning."""
    run = _run_dir(tmp_path)
    analyze_bundle(run)
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "f-figures").symlink_to(victim)
    warnings: list[str] = []
    page = report.write_report(run, out=tmp_path / "o" / "f.html", warnings=warnings)
    assert "<svg" in page.read_text()
    assert not list(victim.iterdir())
    assert any("figures not saved" in w and "symbolic link" in w for w in warnings), warnings


# -- no globs in queries -----------------------------------------------------------------

def test_query_folder_names_with_glob_and_quote_characters(tmp_path):
    _complete_bundle(tmp_path, "r1", 1)
    _complete_bundle(tmp_path, "r*", 2)
    _complete_bundle(tmp_path, "r[1]'x", 3)
    df = run_query(tmp_path, "SELECT run_id, bytes FROM flows ORDER BY bytes")
    assert df.to_dict("records") == [{"run_id": "r1", "bytes": 1}, {"run_id": "r*", "bytes": 2},
                                     {"run_id": "r[1]'x", "bytes": 3}]


# -- links in the study report ------------------------------------------------------------

def test_study_report_links_only_relative_files_inside(tmp_path):
    for name in ("javascript:alert(1)", "case a", "ok"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.html").write_text("x")
    res = StudyResult(study="P9", title="t")
    page = study_report.render(res, {}, tmp_path)
    assert 'href="javascript' not in page
    assert 'href="./ok/report.html"' in page and 'href="./case%20a/report.html"' in page
    assert safefiles.safe_href("https://example.org/x") == "https://example.org/x"
    for bad in ("javascript:alert(1)", "JaVaScRiPt:x", "data:text/html,x", "//evil.org/x",
                "../outside.html", "/etc/passwd", "file:///etc/passwd"):
        assert safefiles.safe_href(bad) is None, bad
    assert json.dumps(safefiles.safe_href("a b/report.html")) == '"./a%20b/report.html"'


def test_deferred_analysis_never_writes_through_linked_folders(tmp_path):
    from testbed.run.sweep import finish_deferred

    out = tmp_path / "out"
    b = _complete_bundle(out, "r1", 1)
    meta = b.read_metadata()
    meta["analysis"] = "deferred"
    b.write_metadata(meta)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (b.root / "logs").symlink_to(elsewhere)

    def failing(root):
        raise ValueError("boom")

    finish_deferred(out, failing)
    assert list(elsewhere.iterdir()) == []
    assert b.read_metadata()["status"] == "failed"


def test_study_tables_skip_linked_metadata_and_metrics(tmp_path):
    good = _complete_bundle(tmp_path, "r1", 1)
    _complete_bundle(tmp_path / "elsewhere", "r2", 2)
    (tmp_path / "r2").mkdir()
    (tmp_path / "r2" / "metadata.json").symlink_to(tmp_path / "elsewhere/r2/metadata.json")
    (tmp_path / "r3").symlink_to(tmp_path / "elsewhere" / "r2")
    (good.root / "metrics" / "ping.parquet").unlink()
    (good.root / "metrics" / "ping.parquet").symlink_to(tmp_path / "elsewhere/r2/metrics/"
                                                        "ping.parquet")
    assert list(run_table(tmp_path, "flows")["bytes"]) == [1]
    assert run_table(tmp_path, "ping").empty


def test_linked_bundle_folders_are_not_bundles(tmp_path):
    out = tmp_path / "out"
    _complete_bundle(out, "r1", 1)
    _complete_bundle(tmp_path / "elsewhere", "r2", 2)
    (out / "r2").symlink_to(tmp_path / "elsewhere" / "r2")
    df = run_query(out, "SELECT run_id, bytes FROM flows")
    assert df.to_dict("records") == [{"run_id": "r1", "bytes": 1}]
    assert list(runs_frame(out)["run_id"]) == ["r1"]


def test_study_fidelity_banner_names_linked_summaries_and_reads_none(tmp_path):
    """The study report's fidelity banner reads each spec folder's summary.parquet without
    following links: a linked summary or spec folder is named as skipped, not read."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    pd.DataFrame({"run_id": ["x-r1"], "fidelity": ["fail"],
                  "fidelity_reasons": ["fail: planted"]}).to_parquet(elsewhere / "s.parquet")
    out = tmp_path / "study-quick"
    (out / "good").mkdir(parents=True)
    pd.DataFrame({"run_id": ["good-r1"], "fidelity": ["ok"],
                  "fidelity_reasons": [None]}).to_parquet(out / "good" / "summary.parquet")
    (out / "linked-file").mkdir()
    (out / "linked-file" / "summary.parquet").symlink_to(elsewhere / "s.parquet")
    (out / "linked-dir").symlink_to(elsewhere)
    from analysis.claim_runs import study_verdicts
    from analysis.claims import StudyResult

    verdicts, skipped = study_verdicts(out)
    banner = study_report._fidelity_banner(StudyResult("s", "", verdicts=verdicts,
                                                       skipped=skipped))
    assert "planted" not in banner and "x-r1" not in banner
    assert f"skipped {out / 'linked-file' / 'summary.parquet'}: a symbolic link" in banner
    assert f"skipped {out / 'linked-dir'}" in banner


def test_a_linked_paper_toml_is_not_read(tmp_path):
    from analysis.claims import load_paper

    secret = tmp_path / "secret.toml"
    secret.write_text('[paper]\nid = "P9"\n')
    study = tmp_path / "study"
    study.mkdir()
    (study / "paper.toml").symlink_to(secret)
    with pytest.raises(InputError, match="symbolic link"):
        load_paper(study)


def test_report_on_a_file_or_a_study_folder_says_what_it_is(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="f: a file, not a run or sweep folder"):
        report.write_report(tmp_path / "f")
    study = tmp_path / "study"
    _complete_bundle(study / "spec", "r1", 1)
    (study / "spec" / "summary.parquet").write_bytes(b"")
    with pytest.raises(InputError, match=r"it is a study's output: report one spec's folder, "
                                         r"e\.g\. .*spec"):
        report.write_report(study)


def test_what_is_wrong_is_named(tmp_path):
    """A folder or FIFO given as a capture, a file given as a results folder and a folder
    whose one run lost a table were answered "no such capture file", "no such results
    folder" and "no complete run to compare (1 broken)" without the reason."""
    from analysis.compare import load_runs
    from testbed import api

    os.mkfifo(tmp_path / "f.pcap")
    for p, why in ((tmp_path, "a folder, not a capture file"),
                   (tmp_path / "f.pcap", "not a regular file")):
        res = CliRunner().invoke(app, ["analyze", str(p)])
        assert res.exit_code == 2 and why in res.output, res.output
    (tmp_path / "x").write_text("x")
    with pytest.raises(InputError, match="a file, not a results folder"):
        api.load(tmp_path / "x")
    b = _complete_bundle(tmp_path / "one", "r1", 5)
    (b.root / "metrics" / "ping.parquet").unlink()
    with pytest.raises(InputError, match=r"no complete run to compare \(1 broken\); r1: "
                                         r"metrics/ping\.parquet is missing"):
        load_runs([tmp_path / "one"], [])
