"""Workloads end to end: flow-tool FCT vs the pcap (SYN -> last data ACK), P1-style incast
with a short flow, UDP CBR at its rate, and ping series with per-echo records.

Set ``TRANSPORT_CAPTURE_OUT=<dir>`` to keep the raw tool output (ping) there.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from mininet.topo import Topo

from testbed.core.commands import CommandRunner
from testbed.host.capture import CaptureSet
from testbed.host.traffic.flows import FlowRun
from testbed.host.traffic.ping import PingRun, format_table, summarize
from testbed.net.shaping import LinkShape, mininet_params
from testbed.plan import patterns
from testbed.plan.flows import resolve_flows
from testbed.spec.model import PathSpec
from topologies.multipath import MultiHomedTopo
from topologies.pair import PairTopo

pytestmark = [pytest.mark.integration, pytest.mark.needs_kernel("netem")]

SHAPE = LinkShape(bw_bps=10_000_000, delay_s=0.010, queue_pkts=100)


def dirs(tmp: Path) -> tuple[Path, Path, Path]:
    out = tuple(tmp / d for d in ("samples", "logs", "pcap"))
    for d in out:
        d.mkdir(parents=True, exist_ok=True)
    return out  # type: ignore[return-value]


def pcap_fct(runner: CommandRunner, pcap: Path) -> dict[int, float]:
    """Client port -> SYN to the ACK covering the client's last data byte (tshark)."""
    out = runner.run(["tshark", "-r", str(pcap), "-n", "-Y", "tcp", "-T", "fields",
                      "-e", "frame.time_epoch", "-e", "tcp.srcport", "-e", "tcp.dstport",
                      "-e", "tcp.flags.syn", "-e", "tcp.flags.ack", "-e", "tcp.len",
                      "-e", "tcp.seq", "-e", "tcp.ack"], timeout=120).stdout
    pkts = [line.split("\t") for line in out.splitlines() if line.strip()]
    syn: dict[int, float] = {}
    data_end: dict[int, int] = {}
    for t, sp, dp, fsyn, fack, ln, seq, _ack in pkts:
        sp_, dp_ = int(sp), int(dp)
        if fsyn in ("1", "True") and fack in ("0", "False"):
            syn.setdefault(sp_, float(t))
        if int(ln) > 0 and dp_ < 10000:
            data_end[sp_] = max(data_end.get(sp_, 0), int(seq) + int(ln))
    fct = {}
    for t, _sp, dp, _fsyn, fack, _ln, _seq, ack in pkts:
        client = int(dp)
        if client in syn and client in data_end and client not in fct \
                and fack in ("1", "True") and int(ack) >= data_end[client]:
            fct[client] = float(t) - syn[client]
    return fct


@pytest.mark.needs_kernel("netem", "ovs")
def test_flowtool_fct_matches_pcap(make_network, tmp_path: Path) -> None:
    # MultiHomedTopo shapes on the switch ports, so the client's own interface is
    # unshaped: its capture sees the SYN when it is sent and the ACK when it arrives.
    # 2 Mbit/s: a 200 KB flow takes ~0.85 s.  The app's FCT ends when the server's byte
    # count reaches it, so it adds the scheduling of two processes to SYN -> last ACK: a
    # few ms as a rule, but 25 ms once in a CI run under software emulation (6.4 % of a
    # 0.39 s flow at 5 Mbit/s; at 10 Mbit/s one flow in four read 5.1 %).  The limit
    # stays 5 %; the longer flow keeps such a pause at ~3 % of it.
    topo = MultiHomedTopo(paths=[PathSpec(name="p0", bw=2_000_000, delay=SHAPE.delay_s,
                                          queue=SHAPE.queue_pkts)])
    net = make_network(topo)
    runner, client, server = net.runner, net.host("client"), net.host("server")
    samples, logs, pcap = dirs(tmp_path)
    flows = [replace(f, flow_id=f"short-{i}", start_s=1.5 * i)
             for i, f in enumerate(patterns.one_to_one("short", "client", "server",
                                                       size=200_000) * 4)]
    flows = resolve_flows(flows, {"server": topo.server_addr()})
    # resolve the gateway's MAC first: ARP would otherwise delay the first SYN, which the
    # app-level FCT counts and SYN -> last data ACK does not (measured: +33 ms, 14 %)
    runner.run(["ping", "-c", "1", "-W", "5", topo.server_addr()], host=client)
    with CaptureSet(runner, pcap, logs) as caps:
        caps.add(client, "client-eth0")
        caps.start()
        fr = FlowRun(runner, {"client": client, "server": server}, flows, samples, logs)
        try:
            fr.start()
            assert fr.wait(timeout=60)
        finally:
            fr.stop()
    recs = fr.collect()
    fct = pcap_fct(runner, pcap / "client-client-eth0.pcap")
    missing = [(r["flow_id"], r["sport"]) for r in recs if r["sport"] not in fct]
    assert not missing, (f"no SYN..last-ACK in the capture for {missing}; "
                         f"tcpdump: {caps.stats}; found: {sorted(fct)}")
    rows = []
    for r in recs:
        assert r["error"] is None and r["bytes_received"] == 200_000, r
        ref = fct[r["sport"]]
        rows.append({"flow": r["flow_id"], "app_fct_s": r["fct_s"], "pcap_fct_s": ref,
                     "diff_ms": 1e3 * (r["fct_s"] - ref),
                     "diff_pct": 100 * (r["fct_s"] - ref) / ref})
    print("FIGURES", json.dumps(rows))
    for row in rows:
        assert abs(row["diff_pct"]) <= 5.0, rows


class StarTopo(Topo):
    """Senders h1..hN and a short-flow sender hS on one switch; receiver hR behind a
    shaped port (the incast bottleneck)."""

    def build(self, n: int = 5, shape: LinkShape = SHAPE, **_opts) -> None:
        self.addSwitch("s1", dpid="0000000000000001", failMode="standalone")
        names = [f"h{i + 1}" for i in range(n)] + ["hs", "hr"]
        for i, name in enumerate(names):
            ip = f"10.0.0.{i + 1}/24"
            self.addHost(name, ip=ip)
            if name == "hr":
                self.addLink(name, "s1", port1=0, params1={"ip": ip}, link_name="bottleneck",
                             shape=shape, shape_ends=("s1",), **mininet_params(shape))
            else:
                self.addLink(name, "s1", port1=0, params1={"ip": ip})


@pytest.mark.needs_kernel("netem", "ovs")
def test_incast_five_long_flows_and_a_short_one(make_network, tmp_path: Path) -> None:
    shape = LinkShape(bw_bps=20_000_000, delay_s=0.001, queue_pkts=100)
    topo = StarTopo(n=5, shape=shape)
    net = make_network(topo)
    samples, logs, _ = dirs(tmp_path)
    senders = [f"h{i + 1}" for i in range(5)]
    flows = patterns.incast("incast", senders, "hr", 10_000_000) + [
        replace(f, start_s=2.0) for f in patterns.one_to_one("short", "hs", "hr",
                                                             size=200_000)]
    flows = resolve_flows(flows, {"hr": "10.0.0.7"})
    hosts = {h: net.host(h) for h in [*senders, "hs", "hr"]}
    fr = FlowRun(net.runner, hosts, flows, samples, logs)
    try:
        fr.start()
        finished = fr.wait(timeout=150)
    finally:
        fr.stop()
    recs = fr.collect()
    summary = [{k: r[k] for k in ("flow_id", "src", "bytes_received", "fct_s", "error")}
               for r in recs]
    print("FIGURES", json.dumps(summary))
    assert finished
    assert sorted(r["flow_id"] for r in recs) == sorted(f.flow_id for f in flows)
    lines = (samples / "flows.jsonl").read_text().splitlines()
    assert len(lines) == 6
    for r in recs:
        assert r["error"] is None, r
        assert r["bytes_received"] == r["size_bytes"]
    total = sum(r["bytes_received"] for r in recs) * 8
    span = max(r["end"] for r in recs) - min(r["start"] for r in recs)
    assert total / span <= 1.05 * shape.bw_bps


def test_cbr_rate_and_ping_series(make_network, tmp_path: Path) -> None:
    net = make_network(PairTopo(shape=SHAPE))
    runner, h1, h2 = net.runner, net.host("h1"), net.host("h2")
    samples, logs, _ = dirs(tmp_path)
    flows = resolve_flows(patterns.cbr("cbr", "h1", "h2", 2_000_000, duration=3.0),
                          {"h2": "10.0.0.2"})
    fr = FlowRun(runner, {"h1": h1, "h2": h2}, flows, samples, logs)
    pr = PingRun(runner, h1, "10.0.0.2", samples, name="clean", src="h1", dst="h2",
                 path="link", interval=0.1, count=20)
    try:
        fr.start()
        pr.start()
        assert fr.wait(timeout=30)
        assert pr.wait(timeout=30)
    finally:
        fr.stop()
        pr.stop()
    rec = fr.collect()[0]
    sink = fr.server_records()
    assert rec["error"] is None and len(sink) == 1
    sent_bps = rec["bytes"] * 8 / 3.0
    recv_bps = sink[0]["bytes"] * 8 / 3.0
    assert abs(sent_bps - 2e6) <= 0.05 * 2e6, sent_bps
    assert abs(recv_bps - 2e6) <= 0.05 * 2e6, recv_bps
    rows = pr.collect()
    assert len(rows) == 20 and not any(r["lost"] for r in rows)
    # with CBR at 2 of 10 Mbit/s the RTT stays near 2 x 10 ms
    summ = summarize(rows, label="link")
    assert 19.0 <= summ["avg_ms"] <= 30.0, summ

    # a lossy link: lost echoes get records too
    net.set_shape("link", replace(SHAPE, loss_pct=30.0))
    lossy = PingRun(runner, h1, "10.0.0.2", samples, name="lossy", src="h1", dst="h2",
                    path="link", interval=0.1, count=30)
    lossy.start()
    assert lossy.wait(timeout=30)
    lrows = lossy.collect()
    lsum = summarize(lrows, label="lossy")
    print("FIGURES", json.dumps({"cbr_sent_bps": sent_bps, "cbr_recv_bps": recv_bps}))
    print(format_table([summ, lsum]))
    assert len(lrows) == 30 and 0 < lsum["received"] < 30
    out = os.environ.get("TRANSPORT_CAPTURE_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(samples / "ping-clean.txt", Path(out) / "ping_clean.txt")
        shutil.copy(samples / "ping-lossy.txt", Path(out) / "ping_lossy.txt")
