"""Acceptance (issue 20): a class of submissions made from two real P0 runs
(tests/realruns.py: MPTCP over WiFi + 3G, TCP pinned to the WiFi) graded against the
p0_mptcp_gain assignment: the gradebook holds exactly the expected points and error rows,
the pages are written, and the submissions folder is left as it was."""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from realruns import MPTCP_RUN, TCP_RUN, finished_copy

from testbed.grade.gradebook import grade_class
from testbed.grade.rubric import load_assignment
from testbed.results.bundle import Bundle

ROOT = Path(__file__).resolve().parents[3]

FULL = 8.0


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two runs analysed, their headline stored in metadata.json as a run's end does
    (the kept fixtures' metadata is trimmed to what the analysis reads)."""
    from analysis.bundle import analyze_bundle

    return finished_copy(tmp_path_factory.mktemp("runs"), analyze_bundle)


def _folder(dest: Path, runs: Path, *names: str) -> Path:
    dest.mkdir(parents=True)
    for n in names:
        shutil.copytree(runs / n, dest / "results" / n)
    return dest


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def graded(runs: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> tuple[Path, dict[str, list[dict[str, str]]], dict, dict]:
    work = tmp_path_factory.mktemp("class")
    subs = work / "submissions"
    subs.mkdir()
    both = (MPTCP_RUN, TCP_RUN)
    _folder(subs / "ada", runs, *both)                        # the reference solution
    _folder(subs / "bob", runs, TCP_RUN)                      # wrong: TCP only
    _folder(subs / "cyd", runs, MPTCP_RUN)                    # a missing run
    dan = _folder(subs / "dan", runs, *both)                  # tampered stored metrics
    flows_path = dan / "results" / MPTCP_RUN / "metrics" / "flows.parquet"
    flows = pd.read_parquet(flows_path)
    flows["throughput_bps"] = flows["throughput_bps"] * 3
    flows.to_parquet(flows_path, index=False)
    eve = _folder(work / "eve", runs, *both)                  # a zip-slip archive
    with zipfile.ZipFile(subs / "eve.zip", "w") as zf:
        for p in sorted(eve.rglob("*")):
            if p.is_file():
                zf.write(p, p.relative_to(eve).as_posix())
        zf.writestr("../escaped.txt", "outside")
    fay = _folder(work / "fay", runs, *both)                  # a truncated capture, tar.gz
    pcap = fay / "results" / MPTCP_RUN / "pcap" / "server-server-eth0.pcap"
    pcap.write_bytes(pcap.read_bytes()[: pcap.stat().st_size // 2 + 7])
    with tarfile.open(subs / "fay.tar.gz", "w:gz") as tf:
        tf.add(fay / "results", arcname="results")
    (subs / "gus.zip").write_bytes(b"PK\x03\x04 this is not a zip archive")
    hal = _folder(subs / "hal", runs, *both)                  # a spec edited after the run
    spec = hal / "results" / TCP_RUN / "spec.toml"
    spec.write_text(spec.read_text() + "# edited after the run\n")
    ivy = _folder(subs / "ivy", runs, *both)                  # a fixed key changed: the
    spec = ivy / "results" / TCP_RUN / "spec.toml"            # cell path's delay, and the
    text = spec.read_text()                                   # manifest made to match
    assert text.count('delay = "50ms"') == 1
    spec.write_text(text.replace('delay = "50ms"', 'delay = "5ms"'))
    Bundle(ivy / "results" / TCP_RUN).write_sha256_manifest()
    jon = _folder(subs / "jon", runs, *both)                  # stored flows not parquet
    (jon / "results" / MPTCP_RUN / "metrics" / "flows.parquet").write_bytes(b"PAR1 no")
    before = _tree(subs)
    out = work / "out"
    students = grade_class(subs, load_assignment("p0_mptcp_gain"), out)
    assert _tree(subs) == before, "grading changed the submissions folder"
    assert not (work / "escaped.txt").exists() and not (subs / "escaped.txt").exists()
    rows: dict[str, list[dict[str, str]]] = {}
    for r in csv.DictReader(io.StringIO((out / "gradebook.csv").read_text())):
        rows.setdefault(r["student"], []).append(r)
    return out, rows, {s.student: s for s in students}, before


def _points(rows: list[dict[str, str]]) -> dict[str, str]:
    return {r["check"]: r["points"] for r in rows}


def test_gradebook_points_and_error_rows(graded: tuple) -> None:
    _out, rows, _students, _ = graded
    assert sorted(rows) == ["ada", "bob", "cyd", "dan", "eve", "fay", "gus", "hal", "ivy",
                            "jon"]
    totals = {s: float(_points(r)["total"]) for s, r in rows.items()}
    assert totals == {"ada": FULL, "bob": 1.0, "cyd": 4.0, "dan": FULL, "eve": 0.0,
                      "fay": 0.0, "gus": 0.0, "hal": FULL, "ivy": FULL, "jon": 0.0}
    assert _points(rows["bob"]) == {"tcp-wifi-run": "1", "mptcp-run": "0",
                                    "both-paths-used": "0", "mptcp-goodput": "0",
                                    "gain-over-tcp": "0", "verification": "", "total": "1"}
    assert _points(rows["cyd"])["gain-over-tcp"] == "0"
    errors = {s: [r["feedback"] for r in rs if r["check"] == "error"] for s, rs in rows.items()}
    assert {s for s, e in errors.items() if e} == {"eve", "fay", "gus", "jon"}
    assert "../escaped.txt" in errors["eve"][0] and "refused" in errors["eve"][0]
    assert "server-server-eth0.pcap" in errors["fay"][0] or "captures" in errors["fay"][0]
    assert "not a readable zip" in errors["gus"][0]
    assert errors["jon"][0].startswith(f"{MPTCP_RUN}: metrics/flows.parquet is not a "
                                       "readable parquet table"), errors["jon"]
    # the private folder a submission was graded in is gone: a row names the submission
    assert not [e for es in errors.values() for e in es if "testbed-grade-" in e], errors
    assert "fay.tar.gz" in errors["fay"][0], errors["fay"]
    for s in ("eve", "fay", "gus", "jon"):  # an error row and a total, no check rows
        assert [r["check"] for r in rows[s] if r["check"] not in ("verification",)] == \
            ["error", "total"]


def test_tampered_metrics_are_flagged_and_graded_on_the_captures(graded: tuple) -> None:
    _out, rows, students, _ = graded
    ver = {s: next(r["feedback"] for r in rs if r["check"] == "verification")
           for s, rs in rows.items() if any(r["check"] == "verification" for r in rs)}
    assert ver["ada"].startswith("ok")
    assert "stored metrics differ" in ver["dan"] and "flows" in ver["dan"]
    assert students["dan"].verified == "flagged" and students["ada"].verified == "ok"
    # the metrics of hal's runs match their captures; the manifest shows the edited spec
    assert "stored metrics differ" not in ver["hal"]
    assert f"{TCP_RUN}: files unlike the run's sha256 manifest (spec.toml: changed since " \
        "the run recorded it)" in ver["hal"]
    assert students["hal"].verified == "flagged"
    # ivy's run is consistent (metrics, manifest) but not the assignment's set-up: flagged
    assert ver["ivy"] == f"{TCP_RUN}: spec changes what paths.toml fixes: topology", ver["ivy"]
    assert students["ivy"].verified == "flagged"
    good = {r["check"]: r["measured"] for r in rows["ada"]}
    assert {r["check"]: r["measured"] for r in rows["dan"]} == good


def test_pages_written_hidden_checks_not_shown(graded: tuple) -> None:
    out, _rows, _students, _ = graded
    for s in ("ada", "bob", "cyd", "dan", "eve", "fay", "gus", "hal", "ivy", "jon"):
        page = (out / f"{s}.html").read_text()
        assert "Score:" in page
    ada = (out / "ada.html").read_text()
    assert ada.count("<img") == 3  # two runs' throughput and the checks figure
    assert "[1.5, 2.2]" not in ada and "hidden" in ada
    index = (out / "index.html").read_text()
    assert index.count("<img") == 2 and "ada.html" in index
    totals = list(csv.DictReader(io.StringIO((out / "totals.csv").read_text())))
    assert [(t["student"], t["verified"]) for t in totals][:2] == [("ada", "ok"),
                                                                     ("bob", "ok")]


def test_check_prints_every_check_and_hides_hidden_values(runs: Path) -> None:
    """`testbed check` on the reference: every check PASS, exit 0, and the hidden check's
    interval is not printed (the student sees that it is hidden, not what it expects)."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "check", "--assignment",
                          "p0_mptcp_gain", str(runs)], capture_output=True, text=True,
                         cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, timeout=600)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    checks = [c.name for c in load_assignment("p0_mptcp_gain").rubric.check]
    assert [line.split(":")[0] for line in lines[:len(checks)]] == \
        [f"PASS {c}" for c in checks], res.stdout
    hidden = next(line for line in lines if line.startswith("PASS gain-over-tcp"))
    assert "expected hidden" in hidden and "1.5" not in hidden and "2.2" not in hidden
    shown = next(line for line in lines if line.startswith("PASS mptcp-goodput"))
    assert "6" in shown.split("expected", 1)[1] and "8" in shown.split("expected", 1)[1]
    assert lines[-1] == f"total: {FULL:g} of {FULL:g} points"


def test_check_exits_1_when_grading_would_flag_the_results(runs: Path, tmp_path: Path
                                                            ) -> None:
    """Every check passes, but a spec was edited after its run: grading would mark the
    submission flagged, so `testbed check` must not say all is well (it exited 0)."""
    import os
    import subprocess
    import sys

    mine = shutil.copytree(runs, tmp_path / "mine")
    spec = mine / TCP_RUN / "spec.toml"
    spec.write_text(spec.read_text() + "# tidied up afterwards\n")
    root = Path(__file__).resolve().parents[3]
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "check", "--assignment",
                          "p0_mptcp_gain", str(mine)], capture_output=True, text=True,
                         cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, timeout=600)
    assert res.returncode == 1, (res.stdout, res.stderr)
    lines = res.stdout.splitlines()
    assert all(line.startswith("PASS") for line in lines[:5]), res.stdout
    assert "spec.toml: changed since the run recorded it" in res.stdout
    assert lines[-1].startswith("grading would mark these results flagged"), lines[-1]
    assert "`testbed verify --assignment p0_mptcp_gain DIR`" in lines[-1]
    assert f"each of {mine}," in lines[-1]


def test_check_takes_the_assignments_folders_together(runs: Path, tmp_path: Path) -> None:
    """An assignment's specs may have run into different folders (a study writes one per
    spec): `testbed check` takes several and checks them as one submission."""
    import os
    import subprocess
    import sys

    split = [tmp_path / "a", tmp_path / "b" / "a"]  # two folders of one name
    shutil.copytree(runs / MPTCP_RUN, split[0] / MPTCP_RUN)
    # a study's output: a folder per spec, the runs inside
    shutil.copytree(runs / TCP_RUN, split[1] / "paths" / TCP_RUN)
    root = Path(__file__).resolve().parents[3]

    def check(*folders: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "testbed.cli", "check", "--assignment",
                               "p0_mptcp_gain", *map(str, folders)], capture_output=True,
                              text=True, cwd=root, timeout=600,
                              env={**os.environ, "PYTHONPATH": str(root)})

    both = check(*split)
    assert both.returncode == 0, (both.stdout, both.stderr)
    assert both.stdout.splitlines()[-1] == f"total: {FULL:g} of {FULL:g} points"
    one = check(split[0])
    assert one.returncode == 1 and "FAIL tcp-wifi-run" in one.stdout, one.stdout
    twice = check(split[0], split[0])  # one run id twice
    assert twice.returncode == 2 and f"two bundles named {MPTCP_RUN}" in twice.stderr, \
        twice.stderr
    assert "testbed-check-" not in twice.stderr


def test_an_out_folder_that_holds_anything_is_refused(tmp_path: Path) -> None:
    """A second grading into the same --out replaced gradebook.csv and left the first
    class's student pages beside the new index; now nothing is written."""
    from testbed.core.errors import InputError
    from testbed.grade.gradebook import check_out

    subs, out = tmp_path / "subs", tmp_path / "out"
    subs.mkdir()
    check_out(out, subs)  # new: fine
    out.mkdir()
    check_out(out, subs)  # empty: fine
    (out / "gradebook.csv").write_text("student,check\nalice,total\n")
    (out / "alice.html").write_text("alice")
    with pytest.raises(InputError, match="already holds a gradebook"):
        check_out(out, subs)
    with pytest.raises(InputError, match="inside the submissions folder"):
        check_out(subs / "o", subs)
    assert (out / "gradebook.csv").read_text().startswith("student,check")


@pytest.mark.parametrize("option", [["--max-mb", "0"], ["--max-files", "-1"],
                                    ["--jobs", "-1"]])
def test_a_limit_below_one_is_refused_before_grading(tmp_path: Path, option: list[str]
                                                     ) -> None:
    """--max-mb 0 or --max-files -1 graded every student zero ("submission refused"),
    exit 0; now the option is refused, exit 2, and nothing is written."""
    subs, out = tmp_path / "subs", tmp_path / "out"
    (subs / "alice").mkdir(parents=True)
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "grade", str(subs),
                          "--assignment", "p2_cc", "--out", str(out), *option],
                         capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 2, res.stdout + res.stderr
    assert option[0] in res.stderr and not out.exists()


def test_a_missing_value_stored_either_way_is_the_same() -> None:
    """Bundles written before every column was stored as declared kept an all-null text
    column as objects (None) where today's writer stores strings (NaN): verify called
    every such bundle stale."""
    import numpy as np

    from testbed.grade.verify import _same

    old = pd.DataFrame({"link": [None, None], "n": pd.Series([None, 3], dtype=object),
                        "rate": [1.0, np.nan]})
    new = pd.DataFrame({"link": pd.Series([np.nan, np.nan], dtype="str"),
                        "n": [np.nan, 3.0000001], "rate": [1.0000001, np.nan]})
    assert _same(old, new)
    assert not _same(old, new.assign(n=[np.nan, 4.0]))
    assert not _same(old, new.assign(link=["wifi", None]))
