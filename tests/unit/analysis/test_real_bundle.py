"""The flows and timeseries tables of two real runs, analysed as bundles.

tests/data/analysis/p0-paths/ holds two runs of experiments/p0_wifi_3g/quick/paths.toml
from a CI run in the testbed VM (`mptcp-cubic`: one MPTCP connection, a subflow on `wifi`
and one on `cell`; `tcp-wifi`: one TCP flow on `wifi`), their captures whole but gzipped
(unpacked into a copy here) and their metadata.json reduced to what the analysis reads.
Both captures at the client's `wifi` interface start about 3 s before t0 (the readiness
check's warm-up).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from realruns import MPTCP_RUN, P0_PATHS, TCP_RUN, analysed_copy

from analysis.capture import CaptureAnalysis
from analysis.rows import path_of_address
from testbed.results.query import run_query

README = Path(__file__).resolve().parents[3] / "experiments" / "p0_wifi_3g" / "README.md"
# the queries experiments/p0_wifi_3g/README.md gives (checked to be there verbatim)
PER_WORKLOAD = ("SELECT workload, count(*) AS n, avg(throughput_bps)/1e6 AS mbit_s, "
                "stddev_samp(throughput_bps)/1e6 AS sd FROM flows "
                "WHERE kind != 'subflow' GROUP BY workload ORDER BY workload")
PER_PATH = ("SELECT workload, path, count(*) AS n, avg(throughput_bps)/1e6 AS mbit_s "
            "FROM flows WHERE kind = 'subflow' GROUP BY workload, path "
            "ORDER BY workload, path")
TOLERANCE = 0.02


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    return analysed_copy(tmp_path_factory.mktemp("p0-paths"))


def _table(out: Path, run: str, name: str) -> pd.DataFrame:
    return pd.read_parquet(out / run / "metrics" / f"{name}.parquet")


def _t0(run: str) -> float:
    return float(json.loads((P0_PATHS / run / "metadata.json").read_text())["t0"])


def test_the_captures_hold_packets_before_t0(out):
    # what makes the next test able to fail: without this the clock test proves nothing
    for run in (MPTCP_RUN, TCP_RUN):
        cap = CaptureAnalysis.of(out / run / "pcap" / "client-client-eth0.pcap")
        assert cap.table.cols["ts_ns"].min() / 1e9 < _t0(run) - 2


@pytest.mark.parametrize("run", [MPTCP_RUN, TCP_RUN])
def test_timeseries_on_the_runs_clock(out, run):
    ts = _table(out, run, "timeseries")
    assert len(ts) and set(ts["kind"]) >= {"iface", "path"}
    assert (ts["t_rel"] >= 0).all(), ts[ts["t_rel"] < 0].head()
    k = ts["t_rel"] / ts["bin_s"]
    assert np.allclose(k, np.round(k), atol=1e-6)              # bins aligned to t0
    assert np.allclose(ts["t"] - _t0(run), ts["t_rel"], atol=1e-6)
    assert not ts.duplicated(["kind", "key", "t_rel"]).any()    # one row per series and bin


def _series_mean_bps(ts: pd.DataFrame, kind: str, key: str, start: float, end: float
                     ) -> float:
    """Mean goodput of a series over [start, end]: the data bytes its bins count once,
    over the interval (every data byte of a flow falls inside its own interval)."""
    s = ts[(ts["kind"] == kind) & (ts["key"] == key)]
    assert len(s), f"no {kind} series {key}"
    return float((s["goodput_bps"] * s["bin_s"]).sum() / (end - start))


@pytest.mark.parametrize("run", [MPTCP_RUN, TCP_RUN])
def test_series_mean_over_the_active_interval_agrees_with_flows(out, run):
    flows, ts = _table(out, run, "flows"), _table(out, run, "timeseries")
    assert len(flows)
    for r in flows.itertuples(index=False):
        mean = _series_mean_bps(ts, r.kind, r.flow_id, r.start, r.end)
        assert mean == pytest.approx(r.throughput_bps, rel=TOLERANCE), r.flow_id


def test_a_path_series_agrees_with_the_one_flow_on_it(out):
    flows, ts = _table(out, TCP_RUN, "flows"), _table(out, TCP_RUN, "timeseries")
    (flow,) = flows.itertuples(index=False)
    assert flow.path == "wifi"
    wifi = ts[(ts["kind"] == "path") & (ts["key"] == "wifi")]
    # the bins of the flow's active interval [start, end]
    first, last = np.floor((np.array([flow.start, flow.end]) - _t0(TCP_RUN)) / 0.1 + 1e-9)
    k = np.round(wifi["t_rel"] / wifi["bin_s"])
    active = wifi[(k >= first) & (k <= last)]
    mean = float((active["goodput_bps"] * active["bin_s"]).sum() / (flow.end - flow.start))
    assert mean == pytest.approx(flow.throughput_bps, rel=TOLERANCE)


def test_every_row_says_what_it_is_and_which_path_it_took(out):
    f = _table(out, MPTCP_RUN, "flows").set_index("mptcp_role")
    assert f.loc["initial", "kind"] == f.loc["join", "kind"] == "subflow"
    assert f.loc["connection", "kind"] == "connection"
    assert (f.loc["initial", "path"], f.loc["join", "path"]) == ("wifi", "cell")
    assert pd.isna(f.loc["connection", "path"])
    assert f.loc["initial", "parent"] == f.loc["join", "parent"] == f.loc["connection",
                                                                          "flow_id"]
    tcp = _table(out, TCP_RUN, "flows")
    assert list(tcp["kind"]) == ["flow"] and list(tcp["path"]) == ["wifi"]


def test_subflows_and_connection_inherit_the_workload(out):
    f = _table(out, MPTCP_RUN, "flows").set_index("mptcp_role")
    assert list(f["workload"]) == ["mptcp-cubic"] * 3
    # the application's elapsed time belongs to the transfer's row only
    assert f.loc["connection", "app_elapsed_s"] > 0
    assert f.loc[["initial", "join"], "app_elapsed_s"].isna().all()


def test_one_row_per_workload_and_per_path_queries(out):
    text = " ".join(README.read_text(encoding="utf-8").split())
    assert PER_WORKLOAD in text and PER_PATH in text
    got = run_query(out, PER_WORKLOAD)
    assert list(got["workload"]) == ["mptcp-cubic", "tcp-wifi"]
    assert list(got["n"]) == [1, 1]
    conn = _table(out, MPTCP_RUN, "flows").set_index("kind").loc["connection"]
    tcp = _table(out, TCP_RUN, "flows").iloc[0]
    assert list(got["mbit_s"]) == pytest.approx([conn["throughput_bps"] / 1e6,
                                                 tcp["throughput_bps"] / 1e6])
    paths = run_query(out, PER_PATH)
    assert [tuple(r) for r in paths[["workload", "path"]].to_numpy()] == [
        ("mptcp-cubic", "cell"), ("mptcp-cubic", "wifi")]


def test_path_of_address_multihomed_and_fat_tree():
    multihomed = {"client-eth0": {"host": "client", "path": "a", "addr": "10.0.1.1"},
                  "server-eth1": {"host": "server", "path": "b", "addr": "10.0.2.2/24"}}
    assert path_of_address({"interfaces": multihomed}) == {"10.0.1.1": "a", "10.0.2.2": "b"}
    fat_tree = {f"S{i}-eth0": {"host": f"S{i}", "path": None, "addr": f"10.0.{i}.2"}
                for i in range(4)}
    assert path_of_address({"interfaces": fat_tree}) == {}
    assert path_of_address({}) == {}


def test_a_transfer_without_a_size_gets_its_rate_while_it_sent(tmp_path):
    """A transfer the flow tool ran until the run's end drains what it queued after its
    sender is stopped; an MPTCP connection drains slower than it ran (one subflow finishes
    after the other), so bytes over its whole span read low.  With the run's traffic end
    recorded, its rows' throughput_bps count what the receiver acknowledged before it, over
    the time from the first SYN to it, and agree with the receiver's series there."""
    from realruns import unpacked_copy

    from analysis.bundle import analyze_bundle

    out = unpacked_copy(tmp_path / "runs")
    whole = {}
    for run in (MPTCP_RUN, TCP_RUN):
        analyze_bundle(out / run)
        whole[run] = pd.read_parquet(out / run / "metrics" / "flows.parquet")
        meta_path = out / run / "metadata.json"
        meta = json.loads(meta_path.read_text())
        meta["t_traffic_end"] = meta["t0"] + 6.0  # as if the run had ended at 6 s
        meta_path.write_text(json.dumps(meta))
        analyze_bundle(out / run)
    for run in (MPTCP_RUN, TCP_RUN):
        t_end = json.loads((out / run / "metadata.json").read_text())["t_traffic_end"]
        flows = pd.read_parquet(out / run / "metrics" / "flows.parquet")
        ts = pd.read_parquet(out / run / "metrics" / "timeseries.parquet")
        t0 = json.loads((out / run / "metadata.json").read_text())["t0"]
        for _i, row in flows[flows["kind"] != "subflow"].iterrows():
            kind = "delivered" if row["kind"] == "flow" else "connection"
            s = ts[(ts["key"] == row["flow_id"]) & (ts["kind"] == kind)]
            s = s[s["t_rel"] + s["bin_s"] <= t_end - t0 + 1e-9]
            series = (s["goodput_bps"].fillna(s["rate_bps"]) * s["bin_s"]).sum() \
                / (t_end - row["start"])
            assert row["throughput_bps"] == pytest.approx(series, rel=0.03), row["flow_id"]
            old = whole[run].set_index("flow_id").loc[row["flow_id"], "throughput_bps"]
            assert row["throughput_bps"] != old  # the drain no longer counts
    # the connection counts data-level bytes once; in this run nothing was sent twice, so
    # its subflows' acknowledged bytes (each over its own time) add up to about as much
    flows = pd.read_parquet(out / MPTCP_RUN / "metrics" / "flows.parquet")
    conn = flows[flows["kind"] == "connection"].iloc[0]
    subs = flows[flows["parent"] == conn["flow_id"]]
    t_end = json.loads((out / MPTCP_RUN / "metadata.json").read_text())["t_traffic_end"]
    acked = (subs["throughput_bps"] * (t_end - subs["start"])).sum()
    assert conn["throughput_bps"] == pytest.approx(acked / (t_end - conn["start"]), rel=0.02)
    # fct_s stays null on all of them: no completion time
    assert flows["fct_s"].isna().all()


def test_a_transfer_for_a_duration_gets_its_rate_over_that_duration(tmp_path):
    from realruns import unpacked_copy

    from analysis.bundle import analyze_bundle

    run = unpacked_copy(tmp_path / "runs") / TCP_RUN
    meta = json.loads((run / "metadata.json").read_text())
    meta["t_traffic_end"] = meta["t0"] + 8.0
    (run / "metadata.json").write_text(json.dumps(meta))
    rec = [json.loads(x) for x in (run / "samples" / "flows.jsonl").read_text().splitlines()]
    rec[0]["duration_s"] = 3.0
    (run / "samples" / "flows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rec))
    analyze_bundle(run)
    row = pd.read_parquet(run / "metrics" / "flows.parquet").iloc[0]
    ts = pd.read_parquet(run / "metrics" / "timeseries.parquet")
    s = ts[(ts["kind"] == "delivered") & (ts["t_rel"] + ts["bin_s"]
                                          <= row["start"] + 3.0 - meta["t0"] + 1e-9)]
    assert row["throughput_bps"] == pytest.approx(
        (s["goodput_bps"] * s["bin_s"]).sum() / 3.0, rel=0.03)
