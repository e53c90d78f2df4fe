"""``testbed query``: DuckDB views over bundles (built by a fake runner)."""

from __future__ import annotations

import pandas as pd
import pytest
from test_results import FakeRunner, plans
from typer.testing import CliRunner

from testbed.cli.app import app
from testbed.core.errors import InputError
from testbed.results.query import connect, run_query
from testbed.run.sweep import run_sweep


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    path = tmp_path_factory.mktemp("bundles")
    run_sweep(plans(), path, FakeRunner(fail={3}))
    return path


def test_runs_view_has_params_status_and_headline(out):
    df = run_query(out, 'SELECT run_id, status, "topology.paths.1.bw" AS bw, goodput_bps '
                        "FROM runs ORDER BY goodput_bps")
    assert len(df) == 4
    assert list(df["status"]).count("failed") == 1
    assert set(df["bw"]) == {"2Mbit", "4Mbit"}


def test_flows_only_from_complete_runs_with_run_id(out):
    df = run_query(out, "SELECT run_id, bytes FROM flows ORDER BY bytes")
    assert list(df["bytes"]) == [1000, 2000, 3000]
    ids = {p.run_id for p in plans()[:3]}
    assert set(df["run_id"]) == ids


def test_join_runs_and_flows(out):
    df = run_query(out, 'SELECT r."topology.paths.1.bw" AS bw, sum(f.bytes) AS b '
                        "FROM runs r JOIN flows f USING (run_id) GROUP BY 1 ORDER BY 1")
    assert df.to_dict("records") == [{"bw": "2Mbit", "b": 4000}, {"bw": "4Mbit", "b": 2000}]


def test_every_view_exists_even_when_no_run_is_complete(tmp_path):
    run_sweep(plans()[:1], tmp_path, FakeRunner(fail={0}))
    con = connect(tmp_path)
    for view in ("runs", "flows", "timeseries", "cwnd", "ping", "events"):
        assert con.execute(f"SELECT count(*) FROM {view}").fetchone() == (1 if view == "runs"
                                                                          else 0,)


def test_a_folder_without_bundles_is_an_error(tmp_path):
    with pytest.raises(InputError, match="no result bundles here"):
        connect(tmp_path)
    res = CliRunner().invoke(app, ["query", str(tmp_path), "SELECT * FROM flows"])
    assert res.exit_code == 2
    assert res.stderr.splitlines() == [
        f"error: {tmp_path}: no result bundles here (no <run-id>/metadata.json); "
        "give the --out DIR of `testbed run`"]


def test_a_folder_whose_runs_are_not_read_says_why(tmp_path):
    import os

    (tmp_path / "x-r1").mkdir()
    os.mkfifo(tmp_path / "x-r1" / "metadata.json")  # never opened
    res = CliRunner().invoke(app, ["query", str(tmp_path), "SELECT * FROM flows"])
    assert res.exit_code == 2
    assert res.stderr.splitlines() == [
        f"error: {tmp_path}: no result bundle read here: {tmp_path / 'x-r1'}: metadata.json "
        "is not a regular file; not read as a run"]


def test_a_study_output_is_named_as_such(tmp_path, out):
    import shutil

    shutil.copytree(out, tmp_path / "paths")
    with pytest.raises(InputError, match=r"a study's output: query one spec's folder, "
                                         r"e\.g\. .*/paths$"):
        connect(tmp_path)


def _copy(out, tmp_path):
    import shutil

    shutil.copytree(out, tmp_path / "o")
    return tmp_path / "o"


def test_a_bundle_this_user_cannot_read_is_an_error(tmp_path, out, monkeypatch):
    from pathlib import Path

    from testbed.core import safefiles

    copy = _copy(out, tmp_path)
    victim = copy / plans()[1].run_id / "metadata.json"
    real = safefiles.read_bytes

    def read_bytes(path):  # metadata.json is read through safefiles (never a link)
        if Path(path) == victim:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(safefiles, "read_bytes", read_bytes)
    res = CliRunner().invoke(app, ["query", str(copy), "SELECT count(*) FROM flows"])
    assert res.exit_code == 2
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {victim}: permission denied;")
    from testbed.results.bundle import Bundle

    assert Bundle(victim.parent).status() == "unreadable"


def test_a_corrupt_parquet_is_named(tmp_path, out):
    copy = _copy(out, tmp_path)
    bad = copy / plans()[0].run_id / "metrics" / "flows.parquet"
    bad.write_bytes(b"x" * bad.stat().st_size)  # same size: the manifest does not see it
    res = CliRunner().invoke(app, ["query", str(copy), "SELECT count(*) FROM flows"])
    assert res.exit_code == 2
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}: not a readable parquet")


def test_runs_view_shows_only_documented_statuses(tmp_path, out):
    from testbed.results.bundle import RUN_STATUSES

    copy = _copy(out, tmp_path)
    (copy / plans()[0].run_id / "metrics" / "cwnd.parquet").unlink()  # now broken
    (copy / plans()[2].run_id / "metadata.json").write_text("{not json")  # broken too
    statuses = set(run_query(copy, "SELECT status FROM runs")["status"])
    assert statuses == {"complete", "failed", "broken"}
    assert statuses <= set(RUN_STATUSES)


def test_bad_sql_is_an_input_error(out):
    with pytest.raises(InputError, match="query:"):
        run_query(out, "SELECT nope FROM flows")


@pytest.mark.parametrize("sql", ["", "   ", "-- only a comment"])
def test_no_statement_is_an_input_error(out, sql):
    with pytest.raises(InputError, match=r"query: (no SQL given|the statement returns no rows)"):
        run_query(out, sql)


def test_missing_dir(tmp_path):
    with pytest.raises(InputError, match="no such results folder"):
        run_query(tmp_path / "absent", "SELECT 1")


def test_cli_table_csv_and_errors(out):
    runner = CliRunner()
    res = runner.invoke(app, ["query", str(out), "SELECT count(*) AS n FROM flows", "--csv"])
    assert res.exit_code == 0 and res.stdout == "n\n3\n"
    res = runner.invoke(app, ["query", str(out), "SELECT status FROM runs LIMIT 1"])
    assert res.exit_code == 0 and "status" in res.stdout
    res = runner.invoke(app, ["query", str(out), "SELEC 1"])
    assert res.exit_code == 2 and res.stderr.startswith("error: query:")
    assert "Traceback" not in res.stderr


def test_empty_views_have_the_documented_columns(tmp_path):
    from testbed.results.columns import names

    run_sweep(plans()[:1], tmp_path, FakeRunner(fail={0}))
    for view in ("flows", "timeseries", "cwnd", "ping", "events", "rtt"):
        df = run_query(tmp_path, f"SELECT * FROM {view}")
        assert len(df) == 0 and list(df.columns) == ["run_id", *names(view)]
    # the natural query on a folder of failed runs: no rows, not a Binder error
    assert len(run_query(tmp_path, "SELECT workload, avg(fct_s) FROM flows GROUP BY 1")) == 0


def test_rtt_is_a_view(out):
    df = run_query(out, "SELECT count(*) AS n FROM rtt")
    assert df["n"][0] == 0  # the fake runs wrote no rtt.parquet (older bundles lack it)


def test_a_folder_this_user_cannot_list_is_an_error(tmp_path, monkeypatch):
    from pathlib import Path

    def iterdir(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "iterdir", iterdir)
    with pytest.raises(InputError, match=f"^{tmp_path}: permission denied$"):
        connect(tmp_path)


def test_runs_whose_tables_differ_in_string_width_stack(tmp_path):
    """A resumed sweep's runs held flow_id as string in one file and large_string in
    another (CI, 2026-11-25): the views widen the column instead of refusing."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from testbed.results.query import stacked_table

    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"flow_id": pa.array(["x"], pa.string()), "bytes": [1]}), a)
    pq.write_table(pa.table({"flow_id": pa.array(["y"], pa.large_string()),
                             "bytes": pa.array([None], pa.int64())}), b)
    t = stacked_table([("r1", a), ("r2", b)])
    assert t.num_rows == 2 and t.column("flow_id").to_pylist() == ["x", "y"]


def test_runs_left_out_of_the_views_are_named(tmp_path, out):
    """A folder whose metadata.json is a link, a run whose metrics/ is a link (it read as
    complete with no flows) and a run with a truncated table: each left out with a line,
    in `testbed query`'s stderr and in api.load's warnings."""
    from testbed import api
    from testbed.results.query import left_out

    o = _copy(out, tmp_path)
    complete = sorted(p.parent.parent for p in o.glob("*/metrics/flows.parquet"))
    assert len(complete) >= 3
    linked_meta, linked_metrics, truncated = complete[:3]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (linked_meta / "metadata.json").rename(elsewhere / "metadata.json")
    (linked_meta / "metadata.json").symlink_to(elsewhere / "metadata.json")
    (linked_metrics / "metrics").rename(elsewhere / "metrics")
    (linked_metrics / "metrics").symlink_to(elsewhere / "metrics")
    flows = truncated / "metrics" / "flows.parquet"
    flows.write_bytes(flows.read_bytes()[:100])
    lines = left_out(o)
    assert sorted(line.split(":")[0] for line in lines) == sorted(
        map(str, (linked_meta, linked_metrics, truncated)))
    assert "metadata.json is a symbolic link" in " ".join(lines)
    # each broken run says why (the line was the same catch-all for every cause)
    why = {line.split(":")[0]: line for line in lines}
    assert "broken (metrics is a symbolic link" in why[str(linked_metrics)]
    size = flows.stat().st_size
    assert f"broken (metrics/flows.parquet is {size} bytes, the run wrote " \
        in why[str(truncated)]
    status = dict(run_query(o, "SELECT run_id, status FROM runs").values.tolist())
    assert status[linked_metrics.name] == status[truncated.name] == "broken"
    error = dict(run_query(o, "SELECT run_id, error FROM runs").values.tolist())
    assert error[truncated.name].startswith("metrics/flows.parquet is ")  # and says why
    assert linked_meta.name not in status
    r = CliRunner().invoke(app, ["query", str(o), "SELECT count(*) AS n FROM runs", "--csv"])
    assert r.exit_code == 0
    assert sum(line.startswith("warning: ") for line in r.output.splitlines()) == 3
    assert api.load(o).warnings == tuple(lines)


def test_one_runs_bundle_is_queried_alone(out):
    run = sorted(p.parent.parent for p in out.glob("*/metrics/flows.parquet"))[0]
    df = run_query(run, "SELECT r.run_id, count(f.run_id) AS n FROM runs r "
                        "LEFT JOIN flows f USING (run_id) GROUP BY 1")
    assert df["run_id"].tolist() == [run.name] and int(df["n"].iloc[0]) >= 1


def test_csv_and_json_together_are_refused(out):
    r = CliRunner().invoke(app, ["query", str(out), "SELECT 1", "--csv", "--json"])
    assert r.exit_code == 2 and "give one of them" in r.output


def test_a_table_too_wide_for_the_terminal_shows_one_row_below_the_other(out):
    wide = run_query(out, "SELECT * FROM runs LIMIT 1")
    assert len(wide.columns) > 10
    env = {"COLUMNS": "80"}
    r = CliRunner(env=env).invoke(app, ["query", str(out), "SELECT * FROM runs LIMIT 1"])
    assert r.exit_code == 0
    rows = [line for line in r.output.splitlines() if line.startswith("│")]
    assert len(rows) >= len(wide.columns)  # a line per column, each with its value
    assert any(wide["run_id"].iloc[0] in line for line in rows)
    narrow = CliRunner(env=env).invoke(app, ["query", str(out), "SELECT run_id FROM runs"])
    assert narrow.output.splitlines()[1].strip("┃ ") == "run_id"


def test_large_numbers_keep_their_digits():
    from testbed.results.query import _cell

    assert _cell(1795848332.3046274) == "1795848332.305"
    assert _cell(13650000.0) == "13650000"
    assert _cell(0.123456789) == "0.123457" and _cell(float("nan")) == ""


def test_a_crafted_huge_integer_in_metadata_is_queried_as_text(tmp_path, out):
    import json

    o = _copy(out, tmp_path)
    meta_path = sorted(o.glob("*/metadata.json"))[0]
    meta = json.loads(meta_path.read_text())
    meta["params"]["x.huge"] = 2**64
    meta_path.write_text(json.dumps(meta))
    df = run_query(o, 'SELECT "x.huge" FROM runs WHERE "x.huge" IS NOT NULL')
    assert df["x.huge"].tolist() == [str(2**64)]


@pytest.mark.parametrize("sql", [
    "COPY (SELECT * FROM runs) TO '{target}'",
    "SELECT * FROM read_text('{secret}')",
    "SELECT * FROM read_csv('{secret}')",
    "ATTACH '{target}' AS other",
    "EXPORT DATABASE '{folder}'",
    "SET enable_external_access = true",
    "INSTALL httpfs",
])
def test_sql_reaches_no_file_setting_or_extension(out, tmp_path, sql):
    secret = tmp_path / "secret.txt"
    secret.write_text("a,b\n1,2\n")
    target, folder = tmp_path / "written.csv", tmp_path / "exported"
    with pytest.raises(InputError, match="a query reads only the views") as exc:
        run_query(out, sql.format(target=target, secret=secret, folder=folder))
    assert len(str(exc.value).splitlines()) == 1
    assert not target.exists() and not folder.exists()
    assert "1,2" not in str(exc.value)


def test_a_rubric_check_cannot_write_a_file_or_change_the_views(out, tmp_path):
    """Grading runs an assignment's SQL (somebody else's file) as root.  A check that is
    not one SELECT is refused when the rubric loads; should one reach the grader anyway
    (built without validation), it fails as a check, nothing is written, and the views
    later checks read are unchanged."""
    import pydantic

    from testbed.grade.checks import run_checks
    from testbed.grade.rubric import Check

    target = tmp_path / "out.csv"
    fields = {"expected": 1, "points": 1, "pass": "p", "fail": "f"}
    bad_sql = [f"COPY (SELECT * FROM runs) TO '{target}'",
               "CREATE OR REPLACE TEMP VIEW runs AS SELECT 1 AS x",
               "DROP VIEW runs; SELECT 1",
               "SELECT 1; SELECT 2"]
    for sql in bad_sql:
        with pytest.raises(pydantic.ValidationError, match="statement"):
            Check(name="bad", sql=sql, **fields)
    checks = [Check.model_construct(name=f"bad{i}", sql=sql, expected=1.0, points=1.0,
                                    pass_="p", fail="f", tolerance=0.0, relative=False,
                                    min=None, max=None, hidden=False)
              for i, sql in enumerate(bad_sql)]
    checks.append(Check(name="count", sql="SELECT count(*) FROM runs", **{**fields,
                                                                       "expected": 4}))
    assignment = type("A", (), {"rubric": type("R", (), {"check": checks})()})()
    *refused, count = run_checks(assignment, out)
    assert all(r.measured is None and "the check's query was refused" in r.note
               for r in refused)
    assert count.measured == 4 and count.passed
    assert not target.exists()


def test_a_query_is_one_statement(out):
    with pytest.raises(InputError, match="query: 2 SQL statements; give one"):
        run_query(out, "SELECT 1; SELECT 2")


def test_a_check_measuring_infinity_fails(out):
    """A query giving infinity passed a min-only check (``min <= inf <= inf``).  It is
    measured as nothing, with the reason."""
    from testbed.grade.checks import run_checks
    from testbed.grade.rubric import Check

    checks = [Check(name=f"c{i}", sql=f"SELECT '{v}'::DOUBLE", min=0, points=1, **{
        "pass": "p", "fail": "f"}) for i, v in enumerate(["inf", "-inf", "2"])]
    assignment = type("A", (), {"rubric": type("R", (), {"check": checks})()})()
    pos, neg, two = run_checks(assignment, out)
    assert not pos.passed and pos.measured is None and "not a finite number" in pos.note
    assert not neg.passed and neg.measured is None and "not a finite number" in neg.note
    assert two.passed and two.measured == 2


def test_runs_keep_their_declared_columns_and_types_whatever_a_bundle_says(tmp_path, out):
    """A folder of runs not analysed yet (no headline) had no headline columns, so a
    query naming one failed; a crafted ``"flows"`` parameter replaced the headline's
    ``flows``; a headline value ``"fast"`` made the column text for every run."""
    import json

    o = _copy(out, tmp_path)
    metas = sorted(o.glob("*/metadata.json"))
    for m in metas:
        meta = json.loads(m.read_text())
        meta["headline"] = {}
        m.write_text(json.dumps(meta))
    df = run_query(o, "SELECT throughput_bps_mean, packets FROM runs")
    assert len(df) == len(metas) and df.isna().all().all()

    o2 = _copy(out, tmp_path / "b")
    first, second = sorted(p.parent.parent / "metadata.json"
                           for p in o2.glob("*/metrics/flows.parquet"))[:2]
    meta = json.loads(first.read_text())
    meta["headline"].update(flows=4, throughput_bps_mean=1e6)
    true_flows = 4
    meta["params"]["flows"] = 99
    first.write_text(json.dumps(meta))
    meta = json.loads(second.read_text())
    meta["headline"]["throughput_bps_mean"] = "fast"
    second.write_text(json.dumps(meta))
    rid = first.parent.name
    row = run_query(o2, f"SELECT flows, \"param:flows\" FROM runs WHERE run_id = '{rid}'")
    assert row.values.tolist() == [[true_flows, 99]]
    numbers = run_query(o2, "SELECT run_id, throughput_bps_mean + 0 AS v FROM runs")
    got = dict(numbers.values.tolist())
    # "fast" is no number: null, and the column stays numeric for the other runs
    assert pd.isna(got[second.parent.name]) and got[first.parent.name] == 1e6 + 0

    # numbers no column type holds (10**400 overflows a float; an int past 64 bits) were
    # an OverflowError in every reader of the folder: null in a declared column, text in
    # a parameter's
    meta = json.loads(second.read_text())
    meta["headline"].update(throughput_bps_mean=10**400, flows=1 << 70)
    meta["params"]["huge"] = 10**30
    second.write_text(json.dumps(meta))
    row = run_query(o2, "SELECT throughput_bps_mean, flows, huge FROM runs WHERE run_id = "
                        f"'{second.parent.name}'")
    assert pd.isna(row.iloc[0, 0]) and pd.isna(row.iloc[0, 1])
    assert row.iloc[0, 2] == str(10**30)


def test_an_unquoted_swept_key_gets_a_hint(tmp_path, out):
    """``SELECT controller.kind`` read as table.column: "table controller not found"."""
    with pytest.raises(InputError, match=r'quote them, e\.g\. "topology\.paths\.1\.bw"'):
        run_query(out, "SELECT topology.kind FROM runs")
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="a file, not a results folder"):
        run_query(tmp_path / "f", "SELECT 1")
