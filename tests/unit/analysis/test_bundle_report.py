"""analyze_bundle, the report (run and sweep) and the CLI commands."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from craft import CLIENT, CLIENT2, SERVER, T0, handshake_and_data, mptcp_connection, seg, write
from typer.testing import CliRunner

from analysis import bundle, report, report_sections, sweep_stats
from analysis.capture import CaptureAnalysis
from testbed.cli.app import app
from testbed.core.errors import CaptureFormatError


def _run_dir(tmp_path, with_pcap=True):
    run = tmp_path / "run"
    (run / "samples").mkdir(parents=True)
    if with_pcap:
        (run / "pcap").mkdir()
        write(run / "pcap" / "server-server-eth0.pcap", mptcp_connection([0, 1, 2, 4, 3, 5, 7, 6]))
    meta = {"status": "complete", "t0": T0, "interfaces": {
        "server-eth0": {"host": "server", "path": "wifi", "addr": SERVER},
        "client-eth0": {"host": "client", "path": "wifi", "addr": CLIENT},
        "client-eth1": {"host": "client", "path": "3g", "addr": CLIENT2}}}
    (run / "metadata.json").write_text(json.dumps(meta))
    (run / "spec.toml").write_text('name = "t"\n[topology]\nkind = "multipath"\npaths = [\n'
                                   '  { name = "wifi", bw = "10Mbit", delay = "1ms" },\n]\n')
    (run / "samples" / "cwnd.jsonl").write_text("".join(
        json.dumps({"t": T0 + k * 0.01, "host": "client", "src_addr": CLIENT, "sport": 40000,
                    "dst_addr": SERVER, "dport": 5201, "cwnd": 10 + k}) + "\n" for k in range(5)))
    (run / "samples" / "events.jsonl").write_text(json.dumps(
        {"t_planned": T0 + 0.05, "t_applied": T0 + 0.051, "link": "wifi",
         "changes": {"down": True}, "error": None}) + "\n")
    return run


def test_analyze_bundle_writes_every_table(tmp_path):
    run = _run_dir(tmp_path)
    head = bundle.analyze_bundle(run)
    assert head["flows"] == 1 and head["bytes"] == 8000 and head["captures"] == 1
    assert head["ooo_percent"] == pytest.approx(25.0)  # 2 of 8 at the data level
    assert set(head) == set(bundle.HEADLINE_KEYS)
    flows = pd.read_parquet(run / "metrics" / "flows.parquet")
    assert list(flows.columns) == bundle.FLOW_COLUMNS
    conn = flows[flows["protocol"] == "mptcp"].iloc[0]
    assert conn["reordered_packets"] == 2 and conn["reorder_extent_max"] == 1
    assert set(flows["parent"]) == {"", conn["flow_id"]}
    ts = pd.read_parquet(run / "metrics" / "timeseries.parquet")
    assert set(ts["kind"]) == {"subflow", "connection", "iface", "path"}
    assert ts[ts["kind"] == "connection"]["bytes"].sum() == 8000
    cwnd = pd.read_parquet(run / "metrics" / "cwnd.parquet")
    assert len(cwnd) == 5 and cwnd["t_rel"].iloc[1] == pytest.approx(0.01)
    assert pd.read_parquet(run / "metrics" / "events.parquet")["changes"][0] == '{"down": true}'
    assert list(pd.read_parquet(run / "metrics" / "rtt.parquet").columns) == bundle.RTT_COLUMNS


def test_goodput_excludes_retransmissions(tmp_path):
    run = tmp_path / "r"
    (run / "pcap").mkdir(parents=True)
    write(run / "pcap" / "client-eth0.pcap",
          handshake_and_data(6, order=[0, 1, 2, 3, 2, 4, 5], t_step=0.001))
    head = bundle.analyze_bundle(run, bin_s=1.0)
    assert head["retransmissions"] == 1
    ts = pd.read_parquet(run / "metrics" / "timeseries.parquet")
    flow = ts[ts["kind"] == "flow"].iloc[0]
    assert flow["rate_bps"] == 7000 * 8 and flow["goodput_bps"] == 6000 * 8


def test_missing_inputs_give_empty_tables_with_columns(tmp_path):
    run = tmp_path / "empty"
    run.mkdir()
    head = bundle.analyze_bundle(run)
    assert head["flows"] == 0
    for name, cols in (("flows", bundle.FLOW_COLUMNS), ("timeseries", bundle.TIMESERIES_COLUMNS)):
        df = pd.read_parquet(run / "metrics" / f"{name}.parquet")
        assert len(df) == 0 and list(df.columns) == cols
    assert "cwnd" in pd.read_parquet(run / "metrics" / "cwnd.parquet").columns


def test_corrupt_capture_writes_nothing(tmp_path):
    run = _run_dir(tmp_path)
    p = run / "pcap" / "server-server-eth0.pcap"
    p.write_bytes(p.read_bytes()[:-7])
    with pytest.raises(CaptureFormatError, match=r"server-server-eth0\.pcap"):
        bundle.analyze_bundle(run)
    assert not (run / "metrics").exists()


def test_metrics_identical_whole_and_chunked(tmp_path):
    order = list(range(200))
    for k in range(0, 190, 17):
        order[k], order[k + 3] = order[k + 3], order[k]
    path = write(tmp_path / "big.pcap", handshake_and_data(200, order=order, t_step=1e-4))
    whole = CaptureAnalysis.of(path)
    chunked = CaptureAnalysis.of(path, chunk_bytes=1500)
    pd.testing.assert_frame_equal(whole.flow_rows, chunked.flow_rows)
    pd.testing.assert_frame_equal(whole.segments, chunked.segments)
    assert whole.flow_rows["reordered_packets"].iloc[0] == 36  # 3 per swap (RFC 4737)


def test_port_reuse_splits_connections_and_syn_retransmission_does_not(tmp_path):
    first = handshake_and_data(3)
    resent_syn = first[0].copy()
    resent_syn.time += 0.005
    again = handshake_and_data(2, isn=90_000, t0=1.0)
    ca = CaptureAnalysis.of(write(tmp_path / "p.pcap", [first[0], resent_syn, *first[1:],
                                                         *again]))
    rows = ca.flow_rows
    assert list(rows["bytes"]) == [3000, 2000] and list(rows["packets"]) == [11, 9]
    assert list(rows["flow_id"]) == ["tcp:10.0.1.1:40000>10.0.0.2:5201",
                                     "tcp:10.0.1.1:40000>10.0.0.2:5201#2"]


def test_run_report_has_figures_tables_spec_and_sections(tmp_path):
    run = _run_dir(tmp_path)
    seen = []
    path = report.write_report(run, extra_sections=[lambda ctx: seen.append(ctx.kind) or
                                                    "<h2>Extra</h2>"])
    page = path.read_text()
    assert seen == ["run"] and "<h2>Extra</h2>" in page
    assert page.count("<svg") >= 3 and "throughput (Mbit/s)" in page and "cwnd" in page
    assert "multipath" in page and "mptcp-subflow" in page
    # no verdict on a link's rate from capture bins (a capture before the shaper sees
    # bursts into its queue): the fidelity section, from the links' own counters, gives it
    assert "peak measured rate" not in page
    assert (run / "figures" / "throughput-path.png").is_file()
    assert (run / "figures" / "throughput-path.svg").is_file()
    assert (run / "metrics" / "flows.parquet").is_file()
    assert _json_outside_spec(page) == []


def _json_outside_spec(page: str) -> list[str]:
    """Text of the page (not the spec's <pre>, styles or embedded figures) that reads
    like a JSON object or a Python dict."""
    import re

    text = re.sub(r"<(pre|style|svg|script)\b.*?</\1>", "", page, flags=re.S)
    text = re.sub(r"<[^>]+>", " ", text)
    return re.findall(r"\{\s*(?:\"|'|&quot;|&#x27;)[^{}]{0,60}", text)


def test_capture_losses_name_dropped_and_unwritten_packets():
    got = report_sections.capture_losses({
        "server-server-eth0.pcap": {"captured": 5831, "received": 9963, "dropped": 0},
        "client-client-eth0.pcap": {"captured": 5146, "received": 5146, "dropped": 0},
        "s1-s1-eth1.pcap": {"captured": 900, "received": 1000, "dropped": 100},
        "h1-lo.pcap": {"captured": 6, "received": 12, "dropped": 0},
        "x-x-eth9.pcap": {"captured": None, "received": None, "dropped": None}})
    assert got == [
        "capture s1-s1-eth1.pcap: 100 packets dropped by the kernel and 0 never written, of "
        "1000; flow bytes, throughput and reordering from this capture are incomplete",
        "capture server-server-eth0.pcap: 0 packets dropped by the kernel and 4132 never "
        "written, of 9963; flow bytes, throughput and reordering from this capture are "
        "incomplete"]


def test_run_report_warns_about_an_incomplete_capture(tmp_path):
    run = _run_dir(tmp_path)
    meta = json.loads((run / "metadata.json").read_text())
    meta["captures"] = {"client-client-eth0.pcap": {"captured": 10, "received": 30,
                                                    "dropped": 0}}
    (run / "metadata.json").write_text(json.dumps(meta))
    page = report.write_report(run).read_text()
    assert "capture client-client-eth0.pcap: 0 packets dropped by the kernel and 20 never" \
        in page


def _sweep(tmp_path):
    """A sweep of 18 complete bundles (cc x bandwidth x 3 repetitions) and its summary:
    a sweep report reads the bundles' metadata.json (`testbed.results.summary`)."""
    from testbed.results.bundle import Bundle
    from testbed.results.summary import write_summary

    d = tmp_path / "sweep"
    d.mkdir()
    rng = np.random.default_rng(1)
    for cc in ("reno", "cubic"):
        for bw in ("2Mbit", "10Mbit", "4Mbit"):
            for r in range(3):
                root = d / f"{cc}-{bw}-{r}"
                (root / "metrics").mkdir(parents=True)
                (root / "spec.toml").write_text('name = "x"\n')
                (root / "transcript.jsonl").write_text("{}\n")
                for t in ("flows", "timeseries", "cwnd", "ping", "events"):
                    pd.DataFrame({"bytes": [1]}).to_parquet(root / "metrics" / f"{t}.parquet")
                b = Bundle(root)
                meta = {"run_id": root.name, "status": "complete", "repetition": r, "seed": r,
                        "params": {"transport.cc": cc, "topology.paths.1.bw": bw},
                        "headline": {"throughput_bps_mean": float(bw[:-4]) * 1e6
                                     * (0.9 + 0.01 * rng.random())}}
                meta["files"] = b.manifest()
                b.write_metadata(meta)
    write_summary(d)
    return d


def test_sweep_report_and_paper_values(tmp_path):
    d = _sweep(tmp_path)
    (d / "paper.toml").write_text('[[value]]\nmetric = "throughput_bps_mean"\nlabel = "cubic"\n'
                                  'value = 6e6\ntolerance = 0.1\n'
                                  'where = { "transport.cc" = "cubic" }\n')
    page = report.write_report(d).read_text()
    assert _json_outside_spec(page) == []
    assert page.count("<svg") == 2  # throughput vs each of the two swept parameters
    assert "Comparison with the paper" in page and "differs" in page
    axis = sweep_stats.param_axis(pd.read_parquet(d / "summary.parquet"),
                                  "topology.paths.1.bw")
    assert axis.order == ["2Mbit", "4Mbit", "10Mbit"] and not axis.categorical


def test_cli_analyze_and_errors(tmp_path):
    cap = write(tmp_path / "c.pcap", handshake_and_data(5))
    r = CliRunner().invoke(app, ["analyze", str(cap), "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert pd.read_parquet(tmp_path / "o" / "flows.parquet")["bytes"].iloc[0] == 5000
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(cap.read_bytes()[:-3])
    r = CliRunner().invoke(app, ["analyze", str(bad), "--out", str(tmp_path / "o2")])
    assert r.exit_code == 2 and not (tmp_path / "o2").exists()
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "bad.pcap" in lines[0] and "byte offset" in lines[0]
    r = CliRunner().invoke(app, ["report", str(tmp_path / "nothing")])
    assert r.exit_code == 2
    run = _run_dir(tmp_path / "bundle")  # a bundle's metrics/ is not a place for loose tables
    before = (run / "metadata.json").read_bytes()
    r = CliRunner().invoke(app, ["analyze", str(cap), "--out", str(run / "metrics")])
    assert r.exit_code == 2 and "inside the run bundle" in r.output
    assert (run / "metadata.json").read_bytes() == before
    # an --out that is a file, or that cannot be made: one line, not a traceback
    (tmp_path / "afile").write_text("x")
    for out, why in ((tmp_path / "afile", "not a folder"),
                     (tmp_path / "afile" / "o", "cannot make the folder")):
        r = CliRunner().invoke(app, ["analyze", str(cap), "--out", str(out)])
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and why in lines[0], r.output


def test_sender_and_receiver_captures_answer_their_own_questions(tmp_path):
    run = tmp_path / "two"
    (run / "pcap").mkdir(parents=True)
    write(run / "pcap" / "client-client-eth0.pcap", handshake_and_data(6))
    write(run / "pcap" / "server-server-eth0.pcap",
          handshake_and_data(6, order=[0, 1, 3, 2, 4, 5]))
    (run / "metadata.json").write_text(json.dumps({"t0": T0, "interfaces": {
        "client-eth0": {"host": "client", "path": "wifi", "addr": CLIENT},
        "server-eth0": {"host": "server", "path": "wifi", "addr": SERVER}}}))
    bundle.analyze_bundle(run)
    row = pd.read_parquet(run / "metrics" / "flows.parquet").iloc[0]
    assert row["capture"] == "client-client-eth0"
    assert row["capture_receiver"] == "server-server-eth0"
    assert row["reordered_packets"] == 1 and row["bytes"] == 6000
    ts = pd.read_parquet(run / "metrics" / "timeseries.parquet")
    assert set(ts.loc[ts["kind"] == "path", "capture"]) == {"client-client-eth0"}


def _lossy_transfer(at_sender: bool) -> list:
    """1000-byte segments 0-3 of one TCP flow; segment 2 dropped after the sender's capture
    and sent again at t=2.1 s; the receiver's ACKs as the receiver (or sender) sees them."""
    c, s_ = (CLIENT, 40000), (SERVER, 5201)
    isn, d = 100, 1  # data starts at isn + 1

    def data(t, k):
        return seg(t, c[0], s_[0], c[1], s_[1], isn + d + 1000 * k, 501, "PA", payload=1000)

    def ack(t, upto):
        return seg(t, s_[0], c[0], s_[1], c[1], 501, isn + d + upto, "A")

    pk = [seg(0.0, c[0], s_[0], c[1], s_[1], isn, 0, "S"),
          seg(0.01, s_[0], c[0], s_[1], c[1], 500, isn + 1, "SA"),
          seg(0.02, c[0], s_[0], c[1], s_[1], isn + 1, 501, "A"),
          data(0.1, 0), data(0.11, 1), ack(0.15, 2000)]
    if at_sender:
        pk.append(data(1.05, 2))  # the queue behind the sender's capture drops it
    pk += [data(1.1, 3), ack(1.15, 2000), ack(1.2, 2000),
           data(2.1, 2), ack(2.15, 4000),
           seg(2.2, c[0], s_[0], c[1], s_[1], isn + d + 4000, 501, "FA"),
           seg(2.25, s_[0], c[0], s_[1], c[1], 501, isn + d + 4001, "FA")]
    return pk


def test_delivered_series_counts_what_the_receiver_acknowledged(tmp_path):
    run = tmp_path / "loss"
    (run / "pcap").mkdir(parents=True)
    write(run / "pcap" / "client-client-eth0.pcap", _lossy_transfer(at_sender=True))
    write(run / "pcap" / "server-server-eth0.pcap", _lossy_transfer(at_sender=False))
    (run / "metadata.json").write_text(json.dumps({"t0": T0, "interfaces": {
        "client-eth0": {"host": "client", "path": "wifi", "addr": CLIENT},
        "server-eth0": {"host": "server", "path": "wifi", "addr": SERVER}}}))
    bundle.analyze_bundle(run, bin_s=1.0)
    ts = pd.read_parquet(run / "metrics" / "timeseries.parquet")
    dl = ts[ts["kind"] == "delivered"].sort_values("t_rel")
    assert set(dl["capture"]) == {"server-server-eth0"}
    # 2000 B in order in bin 0; segment 3 waits behind the hole in bin 1; the
    # retransmission releases 2 and 3 in bin 2; the FIN's sequence number is not data
    assert dl["bytes"].tolist() == [2000, 0, 2000]
    assert dl["goodput_bps"].tolist() == [16000, 0, 16000]
    sent = ts[ts["kind"] == "flow"].sort_values("t_rel")
    assert set(sent["capture"]) == {"client-client-eth0"}
    assert sent["goodput_bps"].tolist() == [16000, 16000, 0]  # the sender's view


def test_delivered_bytes_ignore_duplicate_and_backward_acks():
    from analysis import metrics as M
    seg_ = pd.DataFrame({"row": range(6), "flow": [0] * 6, "dir": [0, 1, 1, 0, 1, 1],
                         "payload": [1000, 0, 0, 1000, 0, 0], "end": [1000, 0, 0, 2000, 0, 0],
                         "ack": [0, 1000, 1000, 0, 500, 2001], "flags": [0x18, 0x10, 0x10,
                                                                       0x18, 0x10, 0x11]})
    rows, flow, nbytes = M.delivered_bytes(seg_, np.array([0]))
    assert rows.tolist() == [1, 2, 4, 5] and flow.tolist() == [0] * 4
    # no handshake captured: the first ACK counts from the first data byte; FIN capped
    assert nbytes.tolist() == [1000, 0, 0, 1000]
    empty = M.delivered_bytes(seg_.iloc[:0], np.array([0]))
    assert all(len(a) == 0 for a in empty)


def test_sweep_parameters_leave_out_phase_times_fidelity_and_name_json_values():
    from analysis import plots
    s = pd.DataFrame({"run_id": ["a", "b"], "status": ["complete"] * 2,
                      "setup_s": [3.1, 4.2], "teardown_s": [1.0, 2.0], "wall_s": [9.0, 8.0],
                      "fidelity": ["ok", "warn"], "fidelity_rate_ratio_min": [1.0, 0.8],
                      "transport.cc": ["reno", "cubic"], "throughput_bps_mean": [1e6, 2e6],
                      "workload.0": ['{"kind": "bulk", "name": "tcp-wifi"}',
                                     '{"kind": "bulk", "name": "mptcp-cubic"}']})
    assert sweep_stats.swept_params(s) == ["transport.cc", "workload.0"]
    assert plots.value_label(s["workload.0"][0]) == "tcp-wifi"
    assert plots.value_label('[{"name": "file"}, {"name": "video"}]') == "file+video"
    assert plots.value_label('[{"kind": "bulk"}]') == '[{"kind": "bulk"}]'  # no names
    assert plots.value_label("x" * 40) == "x" * 27 + "\u2026"
    assert plots.value_label(2.5) == "2.5"


def _hashes(root):
    import hashlib

    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_report_with_out_leaves_the_bundle_byte_for_byte_unchanged(tmp_path):
    run = _run_dir(tmp_path)
    bundle.analyze_bundle(run)
    before = _hashes(run)
    dirs_before = sorted(p for p in run.rglob("*") if p.is_dir())
    target = tmp_path / "elsewhere" / "r.html"
    target.parent.mkdir()
    res = CliRunner().invoke(app, ["report", str(run), "--out", str(target)])
    assert res.exit_code == 0, res.output
    assert _hashes(run) == before
    assert sorted(p for p in run.rglob("*") if p.is_dir()) == dirs_before
    page = target.read_text()
    assert "<svg" in page  # the figures are in the page itself
    assert (tmp_path / "elsewhere" / "r-figures").is_dir()  # and beside it, not in RUN


def test_report_with_out_refuses_a_run_not_analysed_yet(tmp_path):
    run = _run_dir(tmp_path)
    before = _hashes(run)
    res = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "r.html")])
    assert res.exit_code == 2
    assert "not analysed yet" in res.stderr and len(res.stderr.splitlines()) == 1
    assert _hashes(run) == before and not (run / "metrics").exists()


def test_the_cwnd_caption_says_how_well_the_sample_times_are_known():
    from analysis.report_sections import cwnd_timing

    text = cwnd_timing(pd.DataFrame({"sample_s": [0.1, 0.2, None]}))
    assert "middle of its ss run" in text and "150 ms (median; longest 200 ms)" in text
    for old in (pd.DataFrame({"t": [1.0]}), pd.DataFrame({"sample_s": [None]})):
        assert "start of its ss run (a bundle before format 1.8)" in cwnd_timing(old)
