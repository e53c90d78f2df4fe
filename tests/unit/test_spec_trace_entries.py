"""``[[schedule]]`` entries with ``trace = "FILE.csv"``: read next to the spec, expanded into
plain events at load (run ids, sweeps, ``--set``, the dry run), problems reported with the
spec's others."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed.core.compat import tomllib
from testbed.core.errors import SpecError
from testbed.run.dryrun import dry_run_commands
from testbed.spec.load import load_spec, spec_to_toml, validate_spec
from testbed.spec.model import ScheduleEvent
from testbed.spec.sweep import plan_runs
from testbed.spec.trace import MAX_TRACE_BYTES

SPEC = """\
name = "trace"
duration = "10s"

[topology]
kind = "multipath"
paths = [
  {{ name = "wifi", bw = "10Mbit", delay = "10ms" }},
  {{ name = "cell", bw = "10Mbit", delay = "30ms" }},
]

[[workload]]
kind = "ping"
src = "client"
dst = "{dst}"

[[schedule]]
at = "1s"
link = "wifi"
down = true

[[schedule]]
link = "cell"
trace = "{trace}"
at = "{at}"

[[schedule]]
at = "2s"
link = "wifi"
up = true
"""
TRACE = "time,bw,delay\n0s,5Mbit,\n1s,2Mbit,40ms\n\n2.5s,,\n3s,10Mbit,\n"


def _spec(folder: Path, trace: str = "cell.csv", at: str = "2s", dst: str = "server",
          csv: str | None = TRACE) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if csv is not None:
        (folder / "cell.csv").write_text(csv)
    path = folder / "spec.toml"
    path.write_text(SPEC.format(trace=trace, at=at, dst=dst))
    return path


def _problems(path: Path) -> list[str]:
    with pytest.raises(SpecError) as err:
        plan_runs(path)
    return str(err.value).splitlines()


def test_rows_become_plain_events_with_the_offset(tmp_path: Path) -> None:
    exp = load_spec(_spec(tmp_path))
    assert exp.schedule == [  # spec order; the row with only a time is left out
        ScheduleEvent(at=1.0, link="wifi", down=True),
        ScheduleEvent(at=2.0, link="cell", bw=5_000_000),
        ScheduleEvent(at=3.0, link="cell", bw=2_000_000, delay=0.04),
        ScheduleEvent(at=5.0, link="cell", bw=10_000_000),
        ScheduleEvent(at=2.0, link="wifi", up=True)]
    # the bundle's spec.toml holds the events themselves, so it runs without the file
    (tmp_path / "cell.csv").unlink()
    assert validate_spec(tomllib.loads(spec_to_toml(exp))) == exp


def test_a_trace_in_a_subfolder_and_no_offset(tmp_path: Path) -> None:
    path = _spec(tmp_path, trace="traces/cell.csv", at="0s", csv=None)
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "cell.csv").write_text(TRACE)
    assert [e.at for e in load_spec(path).schedule] == [1.0, 0.0, 1.0, 3.0, 2.0]


def test_the_trace_is_part_of_the_run_id_and_the_sweep_sees_events(tmp_path: Path) -> None:
    path = _spec(tmp_path)
    first = plan_runs(path)[0].run_id
    (tmp_path / "cell.csv").write_text(TRACE.replace("2Mbit", "3Mbit"))
    assert plan_runs(path)[0].run_id != first
    plans = plan_runs(path, ["schedule.1.at=1s"])  # --set indexes the entries as written
    assert sorted(e.at for e in plans[0].spec.schedule if e.link == "cell") == [1.0, 2.0, 4.0]


def test_dry_run_shows_each_row_at_its_time(tmp_path: Path) -> None:
    plan = plan_runs(_spec(tmp_path))[0]
    text = dry_run_commands(plan, tmp_path / "run").transcript.as_shell()
    blocks = {}
    for t in ("1s", "2s", "3s", "5s"):
        start = text.index(f"# at t = {t} on the run's clock")
        end = text.find("# at t = ", start + 1)
        blocks[t] = text[start:end if end > 0 else len(text)]
    assert "ip link set dev s1-eth1 down" in blocks["1s"]
    assert "tc qdisc change dev s2-eth1 parent 1:1 handle 2: tbf rate 5000000bit" \
        in blocks["2s"]
    assert "ip link set dev s1-eth1 up" in blocks["2s"]
    assert "tc qdisc change dev s2-eth1 root handle 1: netem delay 40000us" in blocks["3s"]
    assert "tbf rate 2000000bit" in blocks["3s"]
    assert "tc qdisc change dev s2-eth2 parent 1:1 handle 2: tbf rate 10000000bit" \
        in blocks["5s"]


def test_a_bad_row_names_the_file_the_row_and_the_cell(tmp_path: Path) -> None:
    path = _spec(tmp_path, csv="time,bw\n0s,5Mbit\n1s,2 Mbps\n")
    assert _problems(path) == [
        f"{path}: schedule[1].trace: cell.csv row 3: column 'bw': '2 Mbps' is not a rate; "
        "use e.g. '4Mbit' (tc reads 'mbps' as megabytes/s; write bits, e.g. '4Mbit')"]


def test_a_row_after_the_end_of_the_run(tmp_path: Path) -> None:
    assert _problems(_spec(tmp_path, at="8s")) == [
        f"{tmp_path / 'spec.toml'}: schedule[1].trace: cell.csv row 6, at: 11s is not before "
        "the end of the run (duration = 10s)"]


def test_trace_problems_come_with_the_spec_s_others(tmp_path: Path) -> None:
    path = _spec(tmp_path, dst="sever", csv="time,bw\n0s,fast\n")
    problems = _problems(path)
    assert len(problems) == 2, problems
    assert "schedule[1].trace: cell.csv row 2: column 'bw': 'fast' is not a rate" \
        in problems[0]
    assert "workload[0].dst: no host named 'sever'" in problems[1]


@pytest.mark.parametrize("trace, words", [
    ("nope.csv", "schedule[1].trace: nope.csv: no such trace file next to the spec"),
    ("../cell.csv", "schedule[1].trace: ../cell.csv: give a path relative to the spec's "
                    "folder, without '..'"),
    ("/etc/passwd", "schedule[1].trace: /etc/passwd: give a path relative"),
    ("link.csv", "schedule[1].trace: link.csv: a symbolic link (not followed)"),
    ("sub/cell.csv", "schedule[1].trace: sub/cell.csv: a symbolic link (not followed)"),
    ("folder", "schedule[1].trace: folder: not a regular file"),
    ("big.csv", f"schedule[1].trace: big.csv: larger than {MAX_TRACE_BYTES} bytes"),
    ("empty.csv", "schedule[1].trace: empty.csv has no row that changes anything"),
])
def test_files_a_spec_may_not_name(tmp_path: Path, trace: str, words: str) -> None:
    path = _spec(tmp_path / "spec", trace=trace)
    (tmp_path / "cell.csv").write_text(TRACE)
    os.symlink("cell.csv", tmp_path / "spec" / "link.csv")
    os.symlink(tmp_path, tmp_path / "spec" / "sub")  # a folder reached through a link
    (tmp_path / "spec" / "folder").mkdir()
    (tmp_path / "spec" / "big.csv").write_text("time,bw\n" + "1s,1Mbit\n" * 200_000)
    (tmp_path / "spec" / "empty.csv").write_text("time,bw\n1s,\n")
    problems = _problems(path)
    assert len(problems) == 1 and words in problems[0], problems


def test_wrong_keys_of_a_trace_entry_are_reported_together(tmp_path: Path) -> None:
    path = _spec(tmp_path)
    path.write_text(path.read_text().replace('at = "2s"\n\n[[schedule]]\nat = "2s"',
                                             'at = "-1s"\nbw = "1Mbit"\n\n[[schedule]]\n'
                                             'at = "2s"'))
    problems = _problems(path)
    assert len(problems) == 2, problems
    assert "schedule[1].bw: a trace entry takes only link, trace and at" in problems[0]
    assert "schedule[1].at: '-1s' is negative" in problems[1]


def test_a_trace_needs_the_spec_s_folder() -> None:
    data = tomllib.loads(SPEC.format(trace="cell.csv", at="0s", dst="server"))
    with pytest.raises(SpecError, match=r"schedule\[1\].trace: a trace is read only with the "
                                        "spec file"):
        validate_spec(data, "s.toml")


def test_a_misspelt_trace_key_is_hinted(tmp_path: Path) -> None:
    path = _spec(tmp_path)
    path.write_text(path.read_text().replace('trace = "cell.csv"', 'trce = "cell.csv"'))
    assert any("schedule[1].trce: unknown key; did you mean 'trace'?" in p
               for p in _problems(path))
