"""`testbed verify DIR --update`: a run whose stored metrics an older analysis made is
analysed again in place from its own captures; a run whose files are unlike its sha256
manifest, or that is not a folder, is left as it was."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pandas as pd
import pytest
from realruns import MPTCP_RUN, TCP_RUN, finished_copy

from testbed.results.bundle import Bundle
from testbed.results.summary import write_summary

ROOT = Path(__file__).resolve().parents[3]


def _testbed(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          timeout=600)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both runs analysed as a run's end does, in a sweep folder with its summary."""
    from testbed.run.execute import analyze_run

    out = finished_copy(tmp_path_factory.mktemp("sweep"), analyze_run)
    write_summary(out)
    return out


def _stale(run: Path) -> pd.DataFrame:
    """Make run's stored flows and headline look as an older analysis left them; return
    the flows as they were."""
    flows = pd.read_parquet(run / "metrics" / "flows.parquet")
    old = flows.copy()
    old["retransmissions"] = old["retransmissions"] * 2
    old.to_parquet(run / "metrics" / "flows.parquet")
    bundle = Bundle(run)
    meta, _why = bundle.load_metadata()
    assert meta is not None
    meta["headline"]["retransmissions"] = 12345
    meta["files"] = bundle.manifest()
    bundle.write_metadata(meta)
    return flows


def test_update_makes_stale_metrics_again_and_rewrites_the_summary(
        sweep: Path, tmp_path: Path) -> None:
    folder = tmp_path / "results"
    shutil.copytree(sweep, folder)
    want = _stale(folder / MPTCP_RUN)
    write_summary(folder)  # the summary as the stale run said
    capture = next((folder / MPTCP_RUN / "pcap").iterdir())
    before = capture.stat().st_mtime_ns

    res = _testbed("verify", str(folder))
    assert res.returncode == 1 and "stored metrics differ" in res.stdout, res.stdout

    res = _testbed("verify", "--update", str(folder))
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{MPTCP_RUN}: updated (flows, headline made again from its captures)" \
        in res.stdout, res.stdout
    assert res.stdout.strip().endswith("updated 1 of 2 run(s)")
    got = pd.read_parquet(folder / MPTCP_RUN / "metrics" / "flows.parquet")
    pd.testing.assert_frame_equal(got, want)
    meta = json.loads((folder / MPTCP_RUN / "metadata.json").read_text())
    assert meta["headline"]["retransmissions"] != 12345
    assert meta["reanalysed"]["differed"] == ["flows", "headline"]
    assert Bundle(folder / MPTCP_RUN).status() == "complete"
    assert Bundle(folder / MPTCP_RUN).check_sha256_manifest() == []
    assert capture.stat().st_mtime_ns == before  # the captures are only read
    summary = pd.read_parquet(folder / "summary.parquet").set_index("run_id")
    assert summary.loc[MPTCP_RUN, "retransmissions"] == meta["headline"]["retransmissions"]
    # the other run was not touched, and now everything verifies
    assert "reanalysed" not in json.loads((folder / TCP_RUN / "metadata.json").read_text())
    res = _testbed("verify", str(folder))
    assert res.returncode == 0, res.stdout


def test_a_run_unlike_its_manifest_is_not_updated(sweep: Path, tmp_path: Path) -> None:
    folder = tmp_path / "results"
    shutil.copytree(sweep, folder)
    run = folder / TCP_RUN
    _stale(run)
    spec = run / "spec.toml"
    spec.write_text(spec.read_text() + "\n# edited after the run\n")
    stored = (run / "metrics" / "flows.parquet").read_bytes()
    meta = json.loads((run / "metadata.json").read_text())
    meta["files"] = Bundle(run).manifest()  # sizes as they are now: the run reads complete
    Bundle(run).write_metadata(meta)

    res = _testbed("verify", "--update", str(run))
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"{TCP_RUN}: not updated: its files are unlike its sha256 manifest " \
        "(spec.toml: changed since the run recorded it)" in res.stdout, res.stdout
    assert (run / "metrics" / "flows.parquet").read_bytes() == stored
    assert "reanalysed" not in json.loads((run / "metadata.json").read_text())


def test_a_run_whose_metrics_alone_were_damaged_is_repaired(sweep: Path,
                                                            tmp_path: Path) -> None:
    """A stored table edited after the run (its size no longer the one recorded) made the
    run broken, and --update refused broken runs: the damage could not be undone.  When
    everything outside metrics/ is as the run wrote it, the tables are made again; a
    run broken elsewhere is still refused, saying why."""
    folder = tmp_path / "results"
    shutil.copytree(sweep, folder)
    want = pd.read_parquet(folder / MPTCP_RUN / "metrics" / "flows.parquet")
    damaged = want.copy()
    damaged.loc[0, "throughput_bps"] *= 2
    damaged.to_parquet(folder / MPTCP_RUN / "metrics" / "flows.parquet")
    (folder / TCP_RUN / "metrics" / "timeseries.parquet").unlink()
    assert Bundle(folder / MPTCP_RUN).status() == "broken"
    # the other run: damaged outside metrics/ as well
    spec = folder / TCP_RUN / "spec.toml"
    spec.write_text(spec.read_text() + "# edited\n")

    res = _testbed("verify", "--update", str(folder))
    assert f"{MPTCP_RUN}: updated (flows" in res.stdout, res.stdout + res.stderr
    pd.testing.assert_frame_equal(
        pd.read_parquet(folder / MPTCP_RUN / "metrics" / "flows.parquet"), want)
    assert Bundle(folder / MPTCP_RUN).status() == "complete"
    assert f"{TCP_RUN}: not updated: the run is broken (spec.toml is " in res.stdout, \
        res.stdout
    assert not (folder / TCP_RUN / "metrics" / "timeseries.parquet").exists()
    assert res.returncode == 1


def test_update_refuses_an_archive(sweep: Path, tmp_path: Path) -> None:
    archive = tmp_path / "run.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(sweep / TCP_RUN, arcname=TCP_RUN)
    res = _testbed("verify", "--update", str(archive))
    assert res.returncode == 2
    assert res.stderr.strip() == f"error: {archive}: --update writes into a folder; give " \
        "the folder (a run's bundle or a results folder), not an archive", res.stderr


def test_what_intake_refuses_is_named_by_the_path_given(tmp_path: Path) -> None:
    """verify and check name a refused link inside the folder given, and a file that is
    no folder, by the path the user typed (they named a member or a bare file name)."""
    folder = tmp_path / "mine"
    (folder / "run").mkdir(parents=True)
    (folder / "run" / "spec.toml").symlink_to("/etc/hostname")
    for cmd in (["verify"], ["check", "--assignment", "p2_cc"]):
        res = _testbed(*cmd, str(folder))
        assert res.returncode == 2
        assert res.stderr.strip() == f"error: {folder}: run/spec.toml: a symbolic link " \
            "(refused)", res.stderr
    plain = tmp_path / "notes.txt"
    plain.write_text("x")
    res = _testbed("verify", str(plain))
    assert res.returncode == 2
    assert res.stderr.strip() == f"error: {plain}: not a folder, .zip or .tar.gz", res.stderr


def test_a_sweep_folder_in_use_is_left_alone(sweep: Path, tmp_path: Path) -> None:
    """While a `testbed run` holds the folder's lock, the runs are not updated, with a
    line saying so (the lock's own message told to 'use another --out')."""
    from testbed.results.bundle import locked
    from testbed.run.execute import analyze_run
    from testbed.run.reanalyse import reanalyse

    folder = tmp_path / "results"
    shutil.copytree(sweep, folder)
    _stale(folder / TCP_RUN)
    before = (folder / TCP_RUN / "metrics" / "flows.parquet").read_bytes()
    child = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                              "from testbed.results.bundle import locked\n"
                              f"with locked({str(folder)!r}):\n"
                              "    print('held', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        done = reanalyse([(folder / TCP_RUN, ["flows"])], analyze_run)
    finally:
        child.kill()
        child.wait()
    assert done == [(f"{TCP_RUN}: not updated: a `testbed run` is writing into {folder}; "
                     "run this again when it has ended", False)]
    assert (folder / TCP_RUN / "metrics" / "flows.parquet").read_bytes() == before
    with locked(folder):  # free again
        pass


def test_a_column_a_later_format_added_without_data_is_no_difference() -> None:
    """A bundle of format 1.7 has no cwnd `sample_s`; re-analysed today its cwnd table
    has the column, null in every row: the stored table still holds what the captures
    and samples give.  A new column with values, or a stored one that is gone, is a
    difference."""
    import pandas as pd

    from testbed.grade.verify import _same

    stored = pd.DataFrame({"t": [1.0, 2.0], "cwnd": [10.0, 12.0]})
    assert _same(stored, stored.assign(sample_s=[None, None]))
    assert not _same(stored, stored.assign(sample_s=[0.1, 0.1]))
    assert not _same(stored.assign(sample_s=[0.1, 0.1]), stored)
    assert not _same(stored, stored.assign(cwnd=[10.0, 13.0], sample_s=[None, None]))


@pytest.mark.parametrize(("key", "value", "named"), [
    ("interfaces", "zz", "interfaces holds str 'zz', not an object"),
    ("interfaces", {"client-eth0": 3}, "interfaces.client-eth0 holds int"),
    ("interfaces", {"client-eth0": {"host": "client", "addr": 7}},
     "interfaces.client-eth0.addr holds int"),
    ("t0", "x", "t0 holds str 'x', not a number"),
    ("captures", [], "captures holds list"),
])
def test_a_metadata_value_of_the_wrong_kind_is_one_line_naming_file_and_key(
        tmp_path: Path, key: str, value: object, named: str) -> None:
    from analysis.bundle import load_metadata
    from analysis.samples import SampleFormatError

    run = tmp_path / "run"
    run.mkdir()
    (run / "metadata.json").write_text(json.dumps({"format_version": "1.8", key: value}))
    with pytest.raises(SampleFormatError) as exc:
        load_metadata(run)
    text = str(exc.value)
    assert len(text.splitlines()) == 1 and named in text
    assert str(run / "metadata.json") in text and "re-run the run" in text


@pytest.mark.parametrize("status", ["bogus", ["complete"]])
def test_a_run_the_views_leave_out_as_broken_is_flagged(sweep: Path, tmp_path: Path,
                                                         status: object) -> None:
    """A status no run writes makes the run `broken` in the views, so no check reads it:
    verification says so instead of `ok`."""
    from testbed.grade.verify import rebuild

    copy = tmp_path / "in"
    shutil.copytree(sweep, copy)
    run = sorted(p for p in copy.iterdir() if (p / "metadata.json").is_file())[0]
    meta = json.loads((run / "metadata.json").read_text())
    meta["status"] = status
    (run / "metadata.json").write_text(json.dumps(meta))
    result = rebuild(copy, tmp_path / "ws")
    flagged = [r for r in result.runs if r.flagged]
    assert [r.run_id for r in flagged] == [run.name]
    assert any("is not a run status" in line and "broken" in line
               for line in flagged[0].lines())
