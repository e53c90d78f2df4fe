"""An MPTCP connection's data level when one of the receiver's captures saw no data."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from craft import CLIENT, CLIENT2, SERVER, T0, mptcp_connection, write

from analysis import bundle
from testbed.results.ranges import out_of_range

SERVER2 = "10.0.3.2"


def _run(tmp_path: Path, second_capture: list | None, first_capture: list | None = None
         ) -> pd.DataFrame:
    run = tmp_path / "run"
    (run / "pcap").mkdir(parents=True)
    packets = mptcp_connection([0, 1, 2, 4, 3, 5, 7, 6]) if first_capture is None \
        else first_capture
    write(run / "pcap" / "server-server-eth0.pcap", packets)
    if second_capture is not None:
        write(run / "pcap" / "server-server-eth1.pcap", second_capture)
    meta = {"status": "complete", "t0": T0, "interfaces": {
        "server-eth0": {"host": "server", "path": "wifi", "addr": SERVER},
        "server-eth1": {"host": "server", "path": "3g", "addr": SERVER2},
        "client-eth0": {"host": "client", "path": "wifi", "addr": CLIENT},
        "client-eth1": {"host": "client", "path": "3g", "addr": CLIENT2}}}
    (run / "metadata.json").write_text(json.dumps(meta))
    bundle.analyze_bundle(run)
    return pd.read_parquet(run / "metrics" / "flows.parquet")


def test_a_receiver_capture_without_data_changes_no_count(tmp_path):
    alone = _run(tmp_path / "a", None)
    # the receiver's second interface saw only a SYN of the joining subflow: no data
    syn_only = [p for p in mptcp_connection() if p.sprintf("%TCP.flags%") == "S"][1:]
    both = _run(tmp_path / "b", syn_only)
    cols = ["bytes", "data_packets", "reordered_packets", "reorder_ratio",
            "reorder_extent_max"]
    a = alone[alone["kind"] == "connection"].iloc[0]
    b = both[both["kind"] == "connection"].iloc[0]
    assert a["data_packets"] == 8 and a["reordered_packets"] == 2
    assert a["reorder_ratio"] == 2 / 8
    assert b[cols].tolist() == a[cols].tolist()
    assert b["capture_receiver"] == "server-server-eth0,server-server-eth1"
    assert out_of_range("flows", both) == []


def test_a_receiver_with_two_interfaces_counts_one_arrival_order(tmp_path):
    """Each subflow reaches the receiver on an interface of its own: reordering and
    reinjections are judged over both, in arrival order, as over one capture."""
    from scapy.layers.inet import TCP

    packets = mptcp_connection([0, 1, 2, 4, 3, 5, 7, 6])
    on_b = [40001 in (p[TCP].sport, p[TCP].dport) for p in packets]
    one = _run(tmp_path / "one", None)
    two = _run(tmp_path / "two", [p for p, b in zip(packets, on_b, strict=True) if b],
               [p for p, b in zip(packets, on_b, strict=True) if not b])
    cols = ["bytes", "data_packets", "reordered_packets", "reorder_ratio",
            "reorder_extent_max"]
    a = one[one["kind"] == "connection"].iloc[0]
    b = two[two["kind"] == "connection"].iloc[0]
    assert a["reordered_packets"] == 2
    assert b[cols].tolist() == a[cols].tolist()
    assert b["capture_receiver"] == "server-server-eth0,server-server-eth1"
    # data of subflow a sent again on subflow b (the other interface), cut otherwise: a
    # reinjection, neither new data nor reordering
    from craft import CLIENT_KEY, dss, seg

    from analysis.flows import key_token

    idsn = key_token(CLIENT_KEY)[1]
    resent = seg(0.2, CLIENT2, SERVER, 40001, 5201, 9001, 9001, "PA", payload=1000,
                 options=[dss(dsn=idsn + 1 + 2500, ssn=4001, dll=1000)])
    again = [*mptcp_connection(), resent]
    on_b = [40001 in (p[TCP].sport, p[TCP].dport) for p in again]
    both = _run(tmp_path / "again", [p for p, b in zip(again, on_b, strict=True) if b],
                [p for p, b in zip(again, on_b, strict=True) if not b])
    c = both[both["kind"] == "connection"].iloc[0]
    assert (c["data_packets"], c["reordered_packets"], c["bytes"]) == (8, 0, 8000)


def test_the_data_level_of_a_capture_without_data_keeps_its_types(tmp_path):
    from analysis.capture import CaptureAnalysis
    from analysis.dsn import DSN_COLUMNS

    full, empty = tmp_path / "full.pcap", tmp_path / "empty.pcap"
    write(full, mptcp_connection())
    write(empty, [p for p in mptcp_connection() if p.sprintf("%TCP.flags%") == "S"])
    for path, rows in ((full, 8), (empty, 0)):
        dsn = CaptureAnalysis.of(path).dsn
        assert len(dsn) == rows
        assert dict(dsn.dtypes.astype(str)) == DSN_COLUMNS, path.name


def test_verify_names_a_single_bundle_by_its_run_id_and_sees_stale_metrics(tmp_path):
    from typer.testing import CliRunner

    from testbed.cli.app import app
    from testbed.results.bundle import Bundle
    from testbed.results.summary import take_analysis

    _run(tmp_path / "out", None)
    run = (tmp_path / "out" / "run").rename(tmp_path / "out" / "mp-0123456789-r1")
    b = Bundle(run)  # what a sweep stores after the analysis: the headline, the manifest
    meta = b.read_metadata()
    take_analysis(meta, bundle.analyze_bundle(run))
    b.write_metadata(meta)
    b.write_sha256_manifest()
    import shutil

    archive = shutil.make_archive(str(tmp_path / run.name), "zip", run.parent, run.name)
    single = shutil.make_archive(str(tmp_path / "single" / run.name), "gztar", run)
    # the bundle, its results folder, a zip holding the bundle's folder, a .tar.gz of the
    # bundle's own files
    for target in (run, run.parent, Path(archive), Path(single)):
        res = CliRunner().invoke(app, ["verify", str(target)])
        assert res.stdout.splitlines() == ["mp-0123456789-r1: ok"], (target, res.output)
        assert res.exit_code == 0
    # metrics written by the analysis before the fix above: the count of a connection
    flows = pd.read_parquet(run / "metrics" / "flows.parquet")
    flows.loc[flows["kind"] == "connection", "data_packets"] = -8
    flows.to_parquet(run / "metrics" / "flows.parquet")
    b.write_sha256_manifest()
    res = CliRunner().invoke(app, ["verify", str(run)])
    assert res.exit_code == 1
    assert res.stdout.startswith("mp-0123456789-r1: stored metrics differ from the "
                                 "captures' (flows)"), res.output


def test_a_runs_retransmissions_count_each_subflow_segment_once():
    # a connection's row sums its subflows': adding both counted every MPTCP one twice
    # (P0's paths runs read MPTCP 101 against TCP 6 in `testbed compare`)
    golden = Path(__file__).parent.parent.parent / "data" / "analysis" / "golden-bundles"
    flows = pd.read_parquet(golden / "p0-paths-quick-55986c1eb3-r1" / "flows.parquet")
    conn = flows[flows["kind"] == "connection"]
    subs = flows[flows["kind"] == "subflow"]
    assert len(conn) == 1 and len(subs) == 2
    assert int(conn["retransmissions"].iloc[0]) == int(subs["retransmissions"].sum()) > 0
    top = flows[flows["parent"].fillna("") == ""]
    assert bundle.headline(flows)["retransmissions"] == int(top["retransmissions"].sum())
    assert bundle.headline(flows)["retransmissions"] < int(flows["retransmissions"].sum())


def test_loose_captures_count_a_connection_where_all_its_subflows_were_seen(tmp_path):
    """`testbed analyze a.pcap b.pcap` (no interfaces map): the connection is counted at
    the capture that saw all its subflows (the server's), whatever order the files come
    in; it was the first subflow's capture, one client interface: 4 of 8 segments."""
    from craft import CLIENT as C1

    packets = mptcp_connection()
    first_only = [p for p in packets if C1 in (p["IP"].src, p["IP"].dst)]
    write(tmp_path / "client-client-eth0.pcap", first_only)
    write(tmp_path / "server-server-eth0.pcap", packets)
    from analysis.capture import CaptureAnalysis
    from analysis.samples import empty_appflows

    rows = []
    for names in (["client-client-eth0", "server-server-eth0"],
                  ["server-server-eth0", "client-client-eth0"]):
        caps = [CaptureAnalysis.of(tmp_path / f"{n}.pcap") for n in names]
        flows = bundle.build_tables(caps, {}, empty_appflows())["flows"]
        conn = flows[flows["kind"] == "connection"].iloc[0]
        rows.append((conn["capture_receiver"], int(conn["bytes"]), int(conn["data_packets"])))
    assert rows[0] == rows[1] == ("server-server-eth0", 8000, 8)


def test_verify_names_a_truncated_capture_by_the_users_path(tmp_path):
    """verify reads a private copy of the bundle; its error named /tmp/testbed-verify-..."""
    from typer.testing import CliRunner

    from testbed.cli.app import app

    _run(tmp_path / "out", None)
    run = tmp_path / "out" / "run"
    cap = run / "pcap" / "server-server-eth0.pcap"
    cap.write_bytes(cap.read_bytes()[:-7])
    for target in (run, run.parent):
        res = CliRunner().invoke(app, ["verify", str(target)])
        assert res.exit_code == 2, res.output
        assert str(cap) in res.output and "testbed-verify-" not in res.output
