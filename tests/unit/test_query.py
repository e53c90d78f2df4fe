"""``testbed query``: DuckDB views over bundles (built by a fake runner)."""

from __future__ import annotations

import pytest
from test_results import FakeRunner, plans
from typer.testing import CliRunner

from testbed.cli import app
from testbed.errors import InputError
from testbed.query import connect, run_query
from testbed.results import run_sweep


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


def test_every_view_exists_even_when_empty(tmp_path):
    con = connect(tmp_path)
    for view in ("runs", "flows", "timeseries", "cwnd", "ping", "events"):
        assert con.execute(f"SELECT count(*) FROM {view}").fetchone() == (0,)


def test_bad_sql_is_an_input_error(out):
    with pytest.raises(InputError, match="query:"):
        run_query(out, "SELECT nope FROM flows")


def test_missing_dir(tmp_path):
    with pytest.raises(InputError, match="no such results directory"):
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
