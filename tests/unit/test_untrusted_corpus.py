"""The corpus of bad specs and crafted bundles (tests/data/untrusted/) through the CLI:
each ends in exit 2 with one line naming the problem, no traceback, and nothing written
outside the bundle."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from testbed.cli.app import app

DATA = Path(__file__).resolve().parents[1] / "data" / "untrusted"
SPECS = sorted((DATA / "specs").glob("*.toml"))
BUNDLES = sorted(p for p in (DATA / "bundles").iterdir() if (p / "case.json").is_file())


def _lines(output: str) -> list[str]:
    return [x for x in output.splitlines() if x.strip()]


def _snapshot(top: Path, skip: Path) -> dict[str, bytes]:
    """Every file under top but outside skip (links listed, not followed)."""
    out = {}
    for p in sorted(top.rglob("*")):
        if skip in p.parents or p == skip:
            continue
        if p.is_symlink():
            out[str(p)] = b"->" + str(p.readlink()).encode()
        elif p.is_file():
            out[str(p)] = p.read_bytes()
        else:
            out[str(p)] = b"<dir>"
    return out


def test_the_corpus_is_there():
    assert len(SPECS) >= 10 and len(BUNDLES) >= 8


@pytest.mark.parametrize("spec", SPECS, ids=[p.stem for p in SPECS])
def test_bad_spec_is_one_line_exit_2(spec, tmp_path):
    expect = spec.read_bytes().split(b"\n", 1)[0].decode().removeprefix("# expect: ")
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["run", str(spec), "--dry-run", "--out", str(out)])
    lines = _lines(r.output)
    assert r.exit_code == 2, r.output
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert expect in lines[0] and spec.name in lines[0]
    assert "Traceback" not in r.output and not isinstance(r.exception, AssertionError)
    assert not out.exists()


@pytest.mark.parametrize("case", BUNDLES, ids=[p.name for p in BUNDLES])
def test_crafted_bundle_is_one_line_exit_2_and_touches_nothing_outside(case, tmp_path):
    spec = json.loads((case / "case.json").read_text())
    work = tmp_path / "work"
    bundle = work / "bundle"
    shutil.copytree(case / "input", bundle)
    outside = work / "OUTSIDE"
    outside.mkdir()
    (outside / "victim").write_text("precious")
    for rel, target in spec["links"].items():
        (bundle / rel).symlink_to(work / target)
    before = _snapshot(work, bundle)
    cmd, *rest = spec["command"]
    r = CliRunner().invoke(app, [cmd, str(bundle / spec["target"]), *rest])
    lines = _lines(r.output)
    assert r.exit_code == spec["exit"], r.output
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert spec["expect"] in lines[0], r.output
    assert "Traceback" not in r.output
    assert _snapshot(work, bundle) == before
