"""The shipped assignments on the quick studies' real bundles (issue 20): each study's
bundles are the reference solution and score full marks; a wrong solution made from the
same bundles (a run left out, the other congestion control only, another study's run)
does not, and `testbed grade` grades them as a class through the command line."""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from studyreports import CHROMIUM, chromium_images, parse

from testbed.grade.gradebook import grade_entry
from testbed.grade.intake import Entry
from testbed.grade.rubric import load_assignment

pytestmark = [pytest.mark.integration, pytest.mark.reproduction]

ROOT = Path(__file__).resolve().parents[2]


def _runs(folder: Path) -> dict[str, Path]:
    """run id -> bundle of a spec's output folder."""
    return {m.parent.name: m.parent for m in folder.glob("*/metadata.json")}


def _param(bundle: Path, key: str) -> object:
    import json

    return json.loads((bundle / "metadata.json").read_text())["params"].get(key)


def _submission(dest: Path, bundles: list[Path]) -> Path:
    for b in bundles:
        shutil.copytree(b, dest / b.name)
    return dest


@pytest.fixture(scope="module")
def made(studies_out: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Submissions: per assignment a reference and a wrong one, from real bundles."""
    tmp = tmp_path_factory.mktemp("subs")
    p2 = studies_out / "p2_three_paths-quick"
    cc, loss = _runs(p2 / "cc"), _runs(p2 / "loss")
    static = _runs(studies_out / "p1_fattree_spray-quick" / "static")
    paths = _runs(studies_out / "p0_wifi_3g-quick" / "paths")
    outage = _runs(studies_out / "p0_wifi_3g-quick" / "outage")
    reno = [b for b in cc.values() if _param(b, "transport.cc") == "reno"]
    no_spray = [b for b in static.values() if _param(b, "controller.kind") != "spray"]
    tcp_only = [b for b in paths.values()
                if (_param(b, "workload.0") or {}).get("protocol") == "tcp"]
    assert len(reno) == 1 and len(no_spray) == 2
    # every repetition of both TCP workloads (P0 quick repeats paths.toml)
    assert {_param(b, "workload.0")["name"] for b in tcp_only} == {"tcp-wifi", "tcp-cell"}
    # the outage's TCP sweep point alone (a WiFi flow and its reconnect over 3G; the
    # sweep swaps the whole workload list)
    outage_tcp = [b for b in outage.values()
                  if ((_param(b, "workload") or [{}])[0]).get("protocol") == "tcp"]
    assert outage_tcp and len(outage) == 2 * len(outage_tcp)  # both points, each repeated
    return {
        "p2_cc/ref": _submission(tmp / "p2-ref", [*cc.values(), *loss.values()]),
        "p2_cc/wrong": _submission(tmp / "p2-wrong", [*reno, *loss.values()]),
        "p2_cc/other-study": _submission(tmp / "p2-other", [*static.values()]),
        "p1_spray/ref": _submission(tmp / "p1-ref", list(static.values())),
        "p1_spray/wrong": _submission(tmp / "p1-wrong", no_spray),
        "p0_mptcp_gain/ref": _submission(tmp / "p0-ref", list(paths.values())),
        "p0_mptcp_gain/wrong": _submission(tmp / "p0-wrong", tcp_only),
        "p0_handover/ref": _submission(tmp / "p0h-ref", list(outage.values())),
        "p0_handover/wrong": _submission(tmp / "p0h-wrong", outage_tcp),
    }


@pytest.mark.parametrize("name", ["p2_cc", "p1_spray", "p0_mptcp_gain", "p0_handover"])
def test_reference_scores_full_marks(made: dict[str, Path], name: str) -> None:
    a = load_assignment(name)
    res = grade_entry(Entry("ref", made[f"{name}/ref"]), a, figures=False)
    assert res.error is None
    failed = [f"{r.check.name}: {r.measured_text()} not {r.check.expected_text()}"
              for r in res.results if not r.passed]
    assert not failed, failed
    assert res.points == a.max_points
    assert res.verification is not None and res.verification.ok, \
        res.verification.summary()


@pytest.mark.parametrize("name,fails", [
    ("p2_cc", {"both-cc-runs", "cubic-goodput", "cc-ratio"}),
    ("p1_spray", {"three-controllers", "all-flows-done", "spray-reorders"}),
    ("p0_mptcp_gain", {"mptcp-run", "both-paths-used", "mptcp-goodput", "gain-over-tcp"}),
    ("p0_handover", {"outage-applied", "both-schemes-run", "mptcp-keeps-flowing",
                     "mptcp-over-tcp"}),
])
def test_wrong_solution_fails_its_checks(made: dict[str, Path], name: str,
                                         fails: set[str]) -> None:
    a = load_assignment(name)
    res = grade_entry(Entry("wrong", made[f"{name}/wrong"]), a, figures=False)
    assert res.error is None
    assert {r.check.name for r in res.results if not r.passed} == fails
    assert res.points == a.max_points - sum(c.points for c in a.rubric.check
                                            if c.name in fails)


def test_grade_cli_class(made: dict[str, Path], tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copytree(made["p2_cc/ref"], subs / "ref")
    shutil.make_archive(str(subs / "wrong"), "gztar", made["p2_cc/wrong"])
    shutil.make_archive(str(subs / "other"), "zip", made["p2_cc/other-study"])
    out = tmp_path / "out"
    exe = Path(sys.prefix) / "bin" / "testbed"
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "testbed.cli"]
    res = subprocess.run([*argv, "grade", str(subs), "--assignment", "p2_cc", "--out",
                          str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(io.StringIO((out / "gradebook.csv").read_text())))
    total = {r["student"]: float(r["points"]) for r in rows if r["check"] == "total"}
    assert total["ref"] == 11 and total["wrong"] == 6 and total["other"] == 0
    ver = {r["student"]: r["feedback"] for r in rows if r["check"] == "verification"}
    assert ver["ref"].startswith("ok") and "not one of the assignment's" in ver["other"]
    for s in ("ref", "wrong", "other", "index"):
        assert (out / f"{s}.html").stat().st_size > 0
    # the feedback pages and the class page render in headless Chromium, every figure in
    # them decoded (the work goes on in tmp_path; the pages' folder is left as written)
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    shown = {}
    for s in ("ref", "wrong", "other", "index"):
        page = out / f"{s}.html"
        images, broken = chromium_images(page, tmp_path)
        assert images == len(parse(page).images) and broken == 0, (s, images, broken)
        shown[s] = images
    assert shown["ref"] > 0 and shown["wrong"] > 0 and shown["index"] > 0, shown
    print(f"\nFIGURES grading pages in Chromium: {shown} images, all decoded")
