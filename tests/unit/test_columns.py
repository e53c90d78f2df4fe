"""The data contract: every column a table writer produces is declared in
testbed.results.columns and described in docs/bundle.md (issue 25)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from analysis import bundle
from testbed.results import columns as C
from testbed.results.bundle import RUN_STATUSES
from testbed.results.ranges import out_of_range
from testbed.results.summary import runs_frame
from testbed.run.sweep import run_sweep

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "bundle.md"
sys.path.insert(0, str(Path(__file__).parent / "analysis"))
from craft import CLIENT, CLIENT2, SERVER, T0, mptcp_connection, write  # noqa: E402

ARROW_KINDS = {"string": ("string", "large_string"), "int64": ("int64", "int32"),
               "float64": ("double", "float"), "bool": ("bool",)}


def check_table(name: str, frame: pd.DataFrame, docs: str) -> list[str]:
    """Problems of frame as table name: columns not declared, or declared but not in docs."""
    problems = [f"{name}.{c}: not declared in testbed/results/columns.py"
                for c in C.undocumented(name, frame.columns)]
    problems += [f"{name}.{c}: declared but not in docs/bundle.md"
                 for c in frame.columns if c in C.names(name) and f"| `{c}` |" not in
                 _section(docs, C.table(name).file)]
    return problems


def _section(docs: str, file: str) -> str:
    start = docs.find(f"### `{file}`")
    end = docs.find("### ", start + 4)
    return docs[start:end if end > 0 else None] if start >= 0 else ""


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """A bundle analysed by the real analysis: an MPTCP capture, samples of every kind."""
    run = tmp_path_factory.mktemp("bundle") / "run"
    (run / "pcap").mkdir(parents=True)
    (run / "samples").mkdir()
    write(run / "pcap" / "server-server-eth0.pcap", mptcp_connection([0, 1, 2, 4, 3, 5, 7, 6]))
    meta = {"status": "complete", "t0": T0, "interfaces": {
        "server-eth0": {"host": "server", "path": "wifi", "addr": SERVER},
        "client-eth0": {"host": "client", "path": "wifi", "addr": CLIENT},
        "client-eth1": {"host": "client", "path": "3g", "addr": CLIENT2}}}
    (run / "metadata.json").write_text(json.dumps(meta))
    line = {"cwnd.jsonl": {"t": T0, "host": "client", "src_addr": CLIENT, "sport": 40000,
                           "dst_addr": SERVER, "dport": 5201, "protocol": "mptcp",
                           "mptcp_token": "ab", "cc": "cubic", "cwnd": 10, "sample_s": 0.08},
            "ping.jsonl": {"t": T0, "src": "client", "dst": "server", "path": "wifi",
                           "seq": 1, "rtt_ms": 1.5, "lost": False},
            "events.jsonl": {"t_planned": T0, "t_applied": T0 + 0.001, "link": "wifi",
                             "changes": {"up": False}, "error": None},
            "flows.jsonl": {"flow_id": "f1", "workload": "download", "src": "server",
                            "dst": "client", "src_addr": SERVER, "dst_addr": CLIENT,
                            "sport": 5201, "dport": 40000, "protocol": "mptcp",
                            "bytes": 8000, "start": T0, "end": T0 + 1, "fct_s": 1.0}}
    for name, rec in line.items():
        (run / "samples" / name).write_text(json.dumps(rec) + "\n")
    bundle.analyze_bundle(run)
    return run


def test_the_registry_names_the_writers_columns():
    assert C.names("flows") == bundle.FLOW_COLUMNS
    assert C.names("timeseries") == bundle.TIMESERIES_COLUMNS
    assert list(bundle.HEADLINE_KEYS) == [c.name for c in C.HEADLINE]
    for must in ("kind", "path", "mptcp_role", "app_elapsed_s", "capture_receiver"):
        assert must in C.names("flows")
    assert "t_rel" in C.names("timeseries")


@pytest.mark.parametrize("name", ["flows", "timeseries", "cwnd", "ping", "events", "rtt"])
def test_every_written_column_is_declared_documented_and_typed(written, name):
    path = written / "metrics" / f"{name}.parquet"
    frame = pd.read_parquet(path)
    assert check_table(name, frame, DOCS.read_text(encoding="utf-8")) == []
    assert list(frame.columns) == C.names(name)  # and nothing declared is missing
    for field in pq.read_schema(path):
        if str(field.type) != "null":  # an all-null column has no type to compare
            want = C.table(name).col(field.name).dtype
            assert str(field.type) in ARROW_KINDS[want], (name, field.name, field.type)


def test_runs_view_columns_are_declared(tmp_path):
    from test_results import FakeRunner, plans

    run_sweep(plans()[:2], tmp_path, FakeRunner(fail={1}))
    # the fake runner's headline is made up (goodput_bps); a real run's is analyze_bundle's
    frame = runs_frame(tmp_path).drop(columns=["goodput_bps"])
    for key in bundle.HEADLINE_KEYS:
        frame[key] = 1.0
    assert check_table("runs", frame, DOCS.read_text(encoding="utf-8")) == []
    assert "topology.paths.1.bw" in frame.columns  # a swept key: allowed by its pattern
    # a swept key named like a declared column gets its own column (testbed.results.summary)
    assert C.undocumented("runs", ["param:seed", "param:fidelity", "param:setup_s"]) == []


def _headline_everywhere(out: Path, **headline) -> None:
    for meta_path in out.glob("*/metadata.json"):
        meta = json.loads(meta_path.read_text())
        if meta.get("headline") is not None:
            meta["headline"] = dict(headline)
            meta_path.write_text(json.dumps(meta))


def test_summary_types_do_not_depend_on_which_values_are_null(tmp_path):
    from test_results import FakeRunner, plans

    from testbed.results.summary import write_summary

    both = {}
    for name, reorder in (("measured", 0.25), ("unmeasured", None)):
        out = tmp_path / name
        run_sweep(plans()[:3], out, FakeRunner(fail={1}))
        _headline_everywhere(out, flows=2, bytes=10, reorder_ratio_mean=reorder,
                             ooo_percent=None if reorder is None else 3)
        schema = pq.read_schema(write_summary(out))
        for field in schema:
            if field.name in C.names("runs") and str(field.type) != "null":
                want = C.table("runs").col(field.name).dtype
                assert str(field.type) in ARROW_KINDS[want], (name, field.name, field.type)
        # every declared float64 column is typed, all-null ones included
        assert str(schema.field("reorder_ratio_mean").type) == "double", name
        assert str(schema.field("fidelity_rate_ratio_min").type) == "double", name
        both[name] = dict(pd.read_parquet(out / "summary.parquet").dtypes.astype(str))
    assert both["measured"] == both["unmeasured"]
    # a failed run has no flows: the int64 column reads as float64 in pandas, with a gap
    assert both["measured"]["flows"] == "float64"


def test_a_crafted_non_numeric_value_in_a_float_column_is_null(tmp_path):
    """Kept as text, one crafted value made the column text for every run of the folder
    (``avg`` failed); the column stays of its declared type and the value is null."""
    from test_results import FakeRunner, plans

    run_sweep(plans()[:3], tmp_path, FakeRunner())
    _headline_everywhere(tmp_path, reorder_ratio_mean="lots")
    first = sorted(tmp_path.glob("*/metadata.json"))[0]
    meta = json.loads(first.read_text())
    meta["headline"]["reorder_ratio_mean"] = 0.25
    first.write_text(json.dumps(meta))
    col = runs_frame(tmp_path)["reorder_ratio_mean"]
    assert col.dtype == "float64" and sorted(col.fillna(-1)) == [-1, -1, 0.25]


@pytest.mark.parametrize("name", ["flows", "timeseries", "cwnd", "ping", "events", "rtt"])
def test_a_real_analysis_writes_values_within_each_columns_range(written, name):
    assert out_of_range(name, pd.read_parquet(written / "metrics" / f"{name}.parquet")) == []


def test_values_a_definition_rules_out_are_named():
    flows = pd.DataFrame({"data_packets": [8, -8, 3], "reordered_packets": [2, 2, 4],
                          "reorder_ratio": [0.25, None, 1.5], "loss_estimate": [0, 2.5, 0],
                          "sport": [-1, 0, 1]})
    assert out_of_range("flows", flows) == [
        "flows.data_packets: 1 value(s) outside >= 0, e.g. -8",
        "flows.reorder_ratio: 1 value(s) outside 0 .. 1, e.g. 1.5",
        "flows: 2 row(s) with more reordered_packets than data_packets"]
    # a signed column (declared), a percentage, and the runs table's headline columns
    assert out_of_range("cwnd", pd.DataFrame({"t_rel": [-0.5], "cwnd": [10]})) == []
    assert out_of_range("runs", pd.DataFrame({"ooo_percent": [-11.3], "flows": [1]})) == [
        "runs.ooo_percent: 1 value(s) outside 0 .. 100, e.g. -11.3"]
    assert C.table("flows").col("loss_estimate").range_text() == ">= 0"
    assert C.table("runs").col("fidelity_event_late_ms_max").range_text() == ""


def test_an_undocumented_column_fails_the_check(written):
    docs = DOCS.read_text(encoding="utf-8")
    frame = pd.read_parquet(written / "metrics" / "flows.parquet")
    bad = frame.assign(secret_metric=1.0)
    assert check_table("flows", bad, docs) == [
        "flows.secret_metric: not declared in testbed/results/columns.py"]
    stale = docs.replace("| `app_elapsed_s` |", "| `app-elapsed` |")
    assert check_table("flows", frame, stale) == [
        "flows.app_elapsed_s: declared but not in docs/bundle.md"]


def test_docs_hold_the_generated_tables():
    text = DOCS.read_text(encoding="utf-8")
    assert C.generated_part(text) == C.markdown(), \
        "docs/bundle.md is stale: run `python -m testbed.results.columns --write docs/bundle.md`"


def test_docs_list_every_status_view_and_file():
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## Run statuses"):text.index("## Time")]
    for status in RUN_STATUSES:
        assert f"| `{status}` |" in section
    from testbed.results.query import VIEWS

    for view in ("runs", *VIEWS):
        assert f"(view `{view}`)" in text
    for name in (".testbed-run.lock", "summary.parquet", "transcript.jsonl", "commands.sh",
                 "rtt.parquet", "_attempts/"):
        assert name in text
    assert "## Fidelity" in text and "fidelity.md" in text
