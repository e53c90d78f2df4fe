import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis.study_report import evaluate
from analysis.study_tables import DELIVERED, SENT, window_rate
from experiments.p3_handover.study import capacity_steps, ideal_rate
from testbed.core.compat import tomllib
from testbed.core.errors import InputError
from testbed.run.study import study_specs

ROOT = Path(__file__).resolve().parents[2]


def test_ideal_rate_matches_paper_eq2():
    # P3 Table 5's ideal: 5 s at 384 kbit/s then 3 s at 10 Mbit/s over a 10 s window
    # (and 2 s down) = (5 x 0.384 + 3 x 10) / 10 = 3.192 Mbit/s
    steps = [(0.0, 384e3), (15.0, 0.0), (17.0, 10e6)]
    assert ideal_rate(steps, 10.0, 20.0) == pytest.approx(3.192e6)


def test_capacity_steps_follow_schedule():
    spec = {"topology": {"paths": [{"name": "access", "bw": "10Mbit"}]},
            "schedule": [{"at": "3.5s", "link": "access", "down": False, "bw": "384kbit"},
                         {"at": "3s", "link": "access", "down": True}]}
    steps = capacity_steps(spec, "access")
    assert steps == [(0.0, 10e6), (3.0, 0.0), (3.5, 384e3)]
    # 0.5 s outage then 4.5 s at 384 kbit/s over the 5 s after the handover
    assert ideal_rate(steps, 3.0, 8.0) == pytest.approx(4.5 * 384e3 / 5)


def test_every_study_has_quick_and_full_specs_and_evaluates_empty(tmp_path):
    for study in sorted((ROOT / "experiments").glob("p*_*")):
        assert study_specs(study, "quick") and study_specs(study, "full")
        res = evaluate(study, tmp_path / "none")
        assert res.claims == [] and res.study.startswith("P")


def test_bad_study_arguments():
    with pytest.raises(InputError, match="--variant"):
        study_specs(ROOT / "experiments" / "p0_wifi_3g", "medium")
    with pytest.raises(InputError, match="no such study"):
        study_specs(ROOT / "experiments" / "nope", "quick")


def test_study_cli_report_only_without_results(tmp_path):
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "study",
                          str(ROOT / "experiments" / "p4_rbuf_blocking"), "--report-only",
                          "--out", str(tmp_path / "missing")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "run `testbed study" in res.stderr
    (tmp_path / "empty").mkdir()
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "study",
                          str(ROOT / "experiments" / "p4_rbuf_blocking"), "--report-only",
                          "--out", str(tmp_path / "empty")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "empty" / "claims.json").read_text()) == []
    assert "P4" in (tmp_path / "empty" / "report.html").read_text()


def test_in_vm_argv_defers_analysis_and_reports_to_the_host(tmp_path):
    from testbed.run.study import in_vm_argv

    argv = in_vm_argv([ROOT / "experiments" / "p2_three_paths"], "quick", tmp_path / "o",
                      ["loss"], fail_fast=True)
    assert argv[argv.index("study") + 1] == str(ROOT / "experiments" / "p2_three_paths")
    for flag in ("--no-vm", "--no-report", "--defer-analysis", "--fail-fast"):
        assert flag in argv
    assert argv[argv.index("--out") + 1] == str((tmp_path / "o").resolve())
    assert argv[argv.index("--only") + 1] == "loss"


def test_run_study_defers_analysis_and_the_host_finishes_it(tmp_path, monkeypatch):
    """run_study(analyze=False) hands analyze=False to every run; finish_analysis then
    analyses each spec folder's runs (what the host does after the VM)."""
    from test_results import FakeRunner, fake_analyze

    import testbed.run.execute
    import testbed.run.preflight
    from testbed.results.bundle import Bundle
    from testbed.run.study import finish_analysis, run_study

    fake = FakeRunner(defer=True)
    seen: list[bool] = []

    def execute(plan, bundle, meta, phase, keeper=None, analyze=True):
        seen.append(analyze)
        return fake(plan, bundle, meta, phase, keeper)

    monkeypatch.setattr(testbed.run.execute, "execute_run", execute)
    monkeypatch.setattr(testbed.run.execute, "analyze_run", fake_analyze)
    checked: list[int] = []
    monkeypatch.setattr(testbed.run.preflight, "check_kernel_support",
                        lambda plans, **kw: checked.append(len(plans)))
    study = ROOT / "experiments" / "p2_three_paths"
    out = tmp_path / "p2"
    outcome = run_study(study, "quick", out, only=["loss", "cc"], reports=False,
                        analyze=False)
    assert not outcome.failed and seen and not any(seen)
    assert checked == [len(seen)]  # every run's CC checked once, before the first run
    runs = [b for spec in ("cc", "loss") for b in (out / spec).iterdir()
            if (b / "metadata.json").exists()]
    assert runs and all(Bundle(b).read_metadata()["analysis"] == "deferred" for b in runs)
    (runs[0] / "pcap" / "corrupt").write_text("x")
    failed = finish_analysis(out)
    assert list(failed) == [f"{runs[0].parent.name}/{runs[0].name}"]
    assert all(Bundle(b).read_metadata()["analysis"] == "host" for b in runs[1:])
    assert finish_analysis(out) == {}


def _bundle(out: Path, rows: list[tuple[str, float, float]], name: str = "r1") -> Path:
    run = out / name
    (run / "metrics").mkdir(parents=True)
    (run / "metadata.json").write_text(json.dumps({"status": "complete", "params": {}}))
    pd.DataFrame([{"kind": k, "key": "f", "t_rel": t, "bin_s": 1.0, "goodput_bps": g,
                   "rate_bps": g} for k, t, g in rows]).to_parquet(run / "metrics" /
                                                                  "timeseries.parquet")
    return run


def test_window_rate_sent_or_delivered(tmp_path):
    # the sender pushed 2 Mbit/s into the window, the receiver acknowledged 0.5 Mbit/s
    _bundle(tmp_path, [("flow", 3.0, 2e6), ("flow", 4.0, 2e6), ("flow", 5.0, 1e6),
                       ("delivered", 3.0, 0.5e6), ("delivered", 4.0, 0.5e6),
                       ("path", 3.0, 9e6)])
    assert window_rate(tmp_path, 3.0, 5.0, kinds=SENT) == pytest.approx(2e6)
    assert window_rate(tmp_path, 3.0, 5.0, kinds=DELIVERED) == pytest.approx(0.5e6)
    assert window_rate(tmp_path, 3.0, 5.0) == pytest.approx(2e6)  # SENT by default
    assert window_rate(tmp_path / "none", 3.0, 5.0) is None


def test_window_rate_delivered_falls_back_per_run(tmp_path):
    # r1 analysed with the delivered series, r0 before it existed: r0 counts what it sent
    _bundle(tmp_path, [("flow", 3.0, 2e6), ("delivered", 3.0, 1e6)])
    _bundle(tmp_path, [("flow", 3.0, 3e6)], name="r0")
    assert window_rate(tmp_path, 3.0, 4.0, kinds=DELIVERED) == pytest.approx((1e6 + 3e6) / 2)
    assert window_rate(tmp_path, 3.0, 4.0, kinds=SENT) == pytest.approx((2e6 + 3e6) / 2)


def test_p3_utilisation_reads_what_the_receiver_acknowledged(tmp_path):
    from analysis.claims import StudyResult
    from experiments.p3_handover.study import evaluate as p3
    spec = (ROOT / "experiments/p3_handover/quick/case1_wlan_to_imt.toml").read_text()
    # the window is 3-8 s; the link is down 3-3.5 s, then 384 kbit/s: ideal 345.6 kbit/s
    rows = [("flow", float(t), 384e3) for t in range(3, 8)]
    rows += [("delivered", float(t), 0.5 * 345.6e3) for t in range(3, 8)]
    run = _bundle(tmp_path / "case1_wlan_to_imt", rows)
    (run / "spec.toml").write_text(spec)
    res = StudyResult("P3", "handover")
    p3({}, tmp_path, res)
    util = [c for c in res.comparisons if c.quantity == "utilisation of the ideal"]
    assert [round(c.ours, 1) for c in util] == [50.0]  # not the 111 % the sender sent
    claim = next(c for c in res.claims if "well below" in c.text)
    assert claim.verdict == "holds" and claim.measured["utilisation_pct"] == pytest.approx(50.0)


def test_p3_a_share_above_the_ideal_says_where_it_comes_from(tmp_path):
    from analysis.claims import StudyResult
    from experiments.p3_handover.study import evaluate as p3
    spec = (ROOT / "experiments/p3_handover/quick/case1_wlan_to_imt.toml").read_text()
    for name, share in (("a", 1.2), ("b", 0.9)):
        run = _bundle(tmp_path / name / "case1_wlan_to_imt",
                      [("delivered", float(t), share * 345.6e3) for t in range(3, 8)])
        (run / "spec.toml").write_text(spec)
        res = StudyResult("P3", "handover")
        p3({}, tmp_path / name, res)
        util = next(c for c in res.comparisons if c.quantity == "utilisation of the ideal")
        assert util.ours == pytest.approx(100 * share)
        assert ("above 100 %" in util.note) == (share > 1), util.note


def test_p3_ideal_counts_the_link_as_the_schedule_applied_it(tmp_path):
    from analysis.claims import StudyResult
    from experiments.p3_handover.study import applied_steps
    from experiments.p3_handover.study import evaluate as p3
    spec = (ROOT / "experiments/p3_handover/quick/case1_wlan_to_imt.toml").read_text()
    # the link went down 30 ms late and came back 20 ms late
    ev = pd.DataFrame({"t_rel": [3.5200, 3.030], "link": ["access"] * 2, "error": [None] * 2,
                       "changes": ['{"bw_bps": 384000, "delay_s": 0.07, "up": true}',
                                   '{"up": false}']})
    steps = applied_steps(tomllib.loads(spec), "access", ev)
    assert steps == [(0.0, 10e6), (3.03, 0.0), (3.52, 384e3)]
    ideal = ideal_rate(steps, 3.0, 8.0)
    assert ideal == pytest.approx((0.03 * 10e6 + 4.48 * 384e3) / 5)  # not 345.6 kbit/s
    failed = ev.assign(error=[None, "tc: error"])  # a change that failed did not happen
    assert applied_steps(tomllib.loads(spec), "access", failed) == [(0.0, 10e6), (3.52, 384e3)]
    run = _bundle(tmp_path / "case1_wlan_to_imt",
                  [("delivered", float(t), 0.5 * ideal) for t in range(3, 8)])
    (run / "spec.toml").write_text(spec)
    ev.to_parquet(run / "metrics" / "events.parquet")
    res = StudyResult("P3", "handover")
    p3({}, tmp_path, res)
    util = next(c for c in res.comparisons if c.quantity == "utilisation of the ideal")
    assert util.ours == pytest.approx(50.0)


def test_a_study_report_is_not_written_over_another_studys_output(tmp_path):
    """`testbed study P3 --report-only --out <P2's output>` replaced P2's report with an
    empty P3 one; now it is one line and nothing is written."""
    from testbed.core.errors import InputError
    from testbed.run import study as st

    p2 = tmp_path / "p2"
    for spec in ("bandwidth", "cc"):
        (p2 / spec).mkdir(parents=True)
        (p2 / spec / "summary.parquet").write_bytes(b"x")
    (p2 / "report.html").write_text("P2's report")
    p3 = Path(__file__).resolve().parents[2] / "experiments" / "p3_handover"
    with pytest.raises(InputError, match="none of study p3_handover's specs"):
        st.write_study_report(p3, p2)
    with pytest.raises(InputError, match="one spec's results"):
        st.write_study_report(p3, p2 / "cc")
    assert (p2 / "report.html").read_text() == "P2's report"


@pytest.mark.parametrize(("paper", "says"), [
    ("[paper\nid = 'P4'\n", "paper.toml: "),                     # not TOML
    ("[paper]\nid = 'P9'\n", "paper.id 'P9' is not one of"),      # no such study
    (None, "paper.toml: a symbolic link (not followed)"),        # a link: never followed
])
def test_a_bad_paper_toml_is_refused_before_anything_runs(tmp_path, paper, says):
    """The study report reads paper.toml after the last run: a broken one failed a study
    only then, its hours of runs done.  Now `testbed study` (here a dry run) refuses it
    first, in one line, exit 2."""
    import shutil

    study = tmp_path / "p4_rbuf_blocking"
    shutil.copytree(ROOT / "experiments" / "p4_rbuf_blocking", study,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (study / "paper.toml").unlink()
    if paper is None:
        (study / "paper.toml").symlink_to(ROOT / "experiments" / "p4_rbuf_blocking" /
                                          "paper.toml")
    else:
        (study / "paper.toml").write_text(paper)
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "study", str(study),
                          "--dry-run", "--no-vm", "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and says in res.stderr, res.stderr
    assert not (tmp_path / "o").exists()
