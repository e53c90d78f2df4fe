"""``testbed compare`` on bad input: one line on stderr naming the problem, exit 2.

The comparison itself is tested on real bundles in tests/unit/analysis/test_compare.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from testbed.cli.app import app


def _bundle(folder: Path, run_id: str, **meta: object) -> Path:
    run = folder / run_id
    run.mkdir(parents=True)
    (run / "metadata.json").write_text(json.dumps({"run_id": run_id, "status": "complete",
                                                   "files": {}, **meta}))
    return run


def _invoke(args: list[str]) -> tuple[int, list[str]]:
    res = CliRunner().invoke(app, ["compare", *args])
    return res.exit_code, [line for line in res.stderr.splitlines() if line.strip()]


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, Path]:
    empty = tmp_path / "empty"
    empty.mkdir()
    newer = tmp_path / "newer"
    _bundle(newer, "x-r1", format_version="99.0")
    failed = tmp_path / "failed"
    _bundle(failed, "x-r1", status="failed")
    _bundle(failed, "x-r2", status="interrupted")
    deferred = tmp_path / "deferred"
    run = _bundle(deferred, "x-r1", analysis="deferred")
    (run / "spec.toml").write_text("")
    (run / "transcript.jsonl").write_text("")
    (tmp_path / "a-file").write_text("")
    fifo = tmp_path / "fifo" / "x-r1"
    fifo.mkdir(parents=True)
    os.mkfifo(fifo / "metadata.json")  # never opened: a reader would wait on it
    return {"empty": empty, "newer": newer, "failed": failed, "deferred": deferred,
            "file": tmp_path / "a-file", "missing": tmp_path / "nowhere",
            "fifo-folder": fifo.parent, "fifo-run": fifo}


@pytest.mark.parametrize(("which", "message"), [
    ("missing", "nowhere: no such file or folder; give a result folder"),
    ("file", "a-file: not a folder"),
    ("empty", "empty: no result bundles here"),
    ("newer", "bundle format 99.0 is newer than this testbed reads (1.x)"),
    ("failed", "failed: no complete run to compare (1 failed, 1 interrupted)"),
    ("deferred", "x-r1: not analysed yet (no metrics/flows.parquet)"),
    ("fifo-folder", "fifo: no result bundle read here: "),
    ("fifo-run", "x-r1/metadata.json is not a regular file; not read as a run"),
])
def test_bad_input_is_one_line_and_exit_2(folders, which, message):
    code, err = _invoke([str(folders[which]), str(folders["empty"])])
    assert code == 2, err
    assert len(err) == 1 and message in err[0], err
    assert "Traceback" not in err[0]


def test_out_inside_an_input_is_refused_before_reading(folders):
    code, err = _invoke([str(folders["newer"]), str(folders["empty"]), "--out",
                         str(folders["empty"] / "cmp")])
    assert code == 2 and len(err) == 1, err
    assert "inside the input" in err[0] and not (folders["empty"] / "cmp").exists()


def test_one_folder_without_by(folders):
    code, err = _invoke([str(folders["newer"])])
    assert code == 2 and len(err) == 1, err
    assert "give two or more result folders or runs to compare, or one folder with --by" \
        in err[0]
