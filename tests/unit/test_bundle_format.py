"""metadata.json's ``format_version``: written by every run, checked by every reader."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_results import FakeRunner, plans
from typer.testing import CliRunner

from testbed.cli.app import app
from testbed.results.bundle import (
    FORMAT_VERSION,
    Bundle,
    BundleFormatError,
    bundles,
    format_version,
)
from testbed.run.sweep import run_sweep

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bundles")
    run_sweep(plans(), path, FakeRunner(fail={3}))
    return path


def _copy(made: Path, tmp_path: Path, version: str | None, which: int = 1) -> tuple[Path, Path]:
    """A copy of the sweep with run `which`'s format_version set (None: the key removed);
    returns (the copy, that run's metadata.json)."""
    out = tmp_path / "out"
    shutil.copytree(made, out)
    meta_file = out / plans()[which].run_id / "metadata.json"
    meta = json.loads(meta_file.read_text())
    meta.pop("format_version")
    if version is not None:
        meta["format_version"] = version
    meta_file.write_text(json.dumps(meta))
    return out, meta_file


def test_every_metadata_json_says_its_format_first(made: Path) -> None:
    found = bundles(made)
    assert len(found) == 4
    for b in found:
        meta = json.loads(b.metadata_path.read_text())
        assert next(iter(meta)) == "format_version"
        assert meta["format_version"] == FORMAT_VERSION
    assert format_version({"format_version": FORMAT_VERSION}) == (1, 10)


def test_a_bundle_without_the_key_reads_as_1_0(made: Path, tmp_path: Path) -> None:
    out, meta_file = _copy(made, tmp_path, None)
    assert format_version(json.loads(meta_file.read_text())) == (1, 0)
    assert Bundle(meta_file.parent).status() == "complete"
    res = CliRunner().invoke(app, ["query", str(out), "SELECT count(*) AS n FROM flows",
                                   "--csv"])
    assert res.exit_code == 0 and res.stdout == "n\n3\n", res.stderr


def test_a_newer_minor_version_is_read(made: Path, tmp_path: Path) -> None:
    major, minor = FORMAT_VERSION.split(".")
    out, meta_file = _copy(made, tmp_path, f"{major}.{int(minor) + 1}")
    assert Bundle(meta_file.parent).status() == "complete"
    res = CliRunner().invoke(app, ["query", str(out), "SELECT count(*) AS n FROM flows",
                                   "--csv"])
    assert res.exit_code == 0 and res.stdout == "n\n3\n", res.stderr


@pytest.mark.parametrize("bad", ["1", "one.zero", "1.0.1", "", 2])
def test_a_malformed_version_makes_the_bundle_broken(made: Path, tmp_path: Path,
                                                     bad: object) -> None:
    _, meta_file = _copy(made, tmp_path, "x")
    meta = json.loads(meta_file.read_text())
    meta["format_version"] = bad
    meta_file.write_text(json.dumps(meta))
    assert format_version(meta) is None
    assert Bundle(meta_file.parent).load_metadata() == (
        None, f"format_version {bad!r} is not MAJOR.MINOR")
    assert Bundle(meta_file.parent).status() == "broken"


def _refused(res: object, meta_file: Path) -> None:
    lines = res.stderr.splitlines()  # type: ignore[attr-defined]
    assert res.exit_code == 2, res.stderr  # type: ignore[attr-defined]
    assert lines == [f"error: {meta_file}: bundle format 2.0 is newer than this testbed "
                     "reads (1.x); upgrade the testbed (git pull, then sudo bash "
                     "scripts/install) to read it"], lines
    assert "Traceback" not in res.stderr  # type: ignore[attr-defined]


def test_query_refuses_a_newer_major_version(made: Path, tmp_path: Path) -> None:
    out, meta_file = _copy(made, tmp_path, "2.0")
    with pytest.raises(BundleFormatError):
        Bundle(meta_file.parent).status()
    _refused(CliRunner().invoke(app, ["query", str(out), "SELECT * FROM runs"]), meta_file)


def test_report_refuses_a_newer_major_version(made: Path, tmp_path: Path) -> None:
    out, meta_file = _copy(made, tmp_path, "2.0")
    _refused(CliRunner().invoke(app, ["report", str(out), "--out",
                                      str(tmp_path / "r.html")]), meta_file)
    _refused(CliRunner().invoke(app, ["report", str(meta_file.parent), "--out",
                                      str(tmp_path / "r.html")]), meta_file)
    assert not (tmp_path / "r.html").exists()


def test_study_report_only_refuses_a_newer_major_version(made: Path, tmp_path: Path) -> None:
    out, meta_file = _copy(made, tmp_path, "2.0")
    study_out = tmp_path / "study"
    study_out.mkdir()
    out.rename(study_out / "paths")
    meta_file = study_out / "paths" / meta_file.relative_to(out)
    res = CliRunner().invoke(app, ["study", str(ROOT / "experiments" / "p0_wifi_3g"),
                                   "--report-only", "--out", str(study_out)])
    _refused(res, meta_file)
    assert not (study_out / "report.html").exists()


def test_analysis_refuses_a_newer_major_version(made: Path, tmp_path: Path) -> None:
    from analysis.bundle import analyze_bundle
    from analysis.study_tables import complete_runs

    out, meta_file = _copy(made, tmp_path, "2.0")
    with pytest.raises(BundleFormatError, match=r"bundle format 2\.0 is newer"):
        analyze_bundle(meta_file.parent)
    with pytest.raises(BundleFormatError, match=r"bundle format 2\.0 is newer"):
        complete_runs(out)


def test_a_sweep_does_not_redo_a_newer_bundle(made: Path, tmp_path: Path) -> None:
    out, meta_file = _copy(made, tmp_path, "2.0")
    before = meta_file.read_bytes()
    with pytest.raises(BundleFormatError):
        run_sweep(plans(), out, FakeRunner())
    assert meta_file.read_bytes() == before
