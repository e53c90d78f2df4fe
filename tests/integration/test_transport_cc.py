"""Congestion control per host: reno vs cubic shows in the sampler's rows; an unknown
one is refused with the available list (exit code 2) and leaves no network behind.
Buffer caps land in the host's namespace only."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from testbed.core.commands import CommandRunner
from testbed.core.errors import UnsupportedError
from testbed.host.mptcp import configure_host, host_interfaces
from testbed.host.sampler import Sampler
from testbed.host.traffic.flows import FlowRun
from testbed.host.transport import apply_tcp, available_ccs
from testbed.net.cleanup import pids_in_netns
from testbed.net.network import Network
from testbed.net.shaping import LinkShape
from testbed.plan import patterns
from testbed.plan.flows import resolve_flows
from testbed.plan.transport import TransportSettings
from topologies.pair import PairTopo

pytestmark = [pytest.mark.integration, pytest.mark.needs_kernel("netem")]

SHAPE = LinkShape(bw_bps=10_000_000, delay_s=0.010, queue_pkts=100)


def run_bulk(net: Network, tmp: Path, seconds: float) -> list[dict]:
    h1, h2 = net.host("h1"), net.host("h2")
    samples, logs = tmp / "samples", tmp / "logs"
    flows = resolve_flows(patterns.one_to_one("bulk", "h1", "h2", duration=seconds),
                          {"h2": "10.0.0.2"})
    fr = FlowRun(net.runner, {"h1": h1, "h2": h2}, flows, samples, logs)
    sampler = Sampler(net.runner, h1, samples, interval=0.05, ports=set(fr.servers.values()))
    try:
        sampler.start()
        fr.start()
        assert fr.wait(timeout=seconds + 30)
    finally:
        fr.stop()
        sampler.stop()
    assert fr.collect()[0]["error"] is None
    out = os.environ.get("TRANSPORT_CAPTURE_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(samples / "ss-h1.txt", Path(out) / f"ss_samples_{tmp.name}.txt")
    return [json.loads(x) for x in (samples / "cwnd.jsonl").read_text().splitlines()]


def test_reno_and_cubic_show_in_sampler_rows(make_network, tmp_path: Path) -> None:
    net = make_network(PairTopo(shape=SHAPE))
    seen = {}
    for cc in ("reno", "cubic"):
        for name in ("h1", "h2"):
            h = net.host(name)
            applied = configure_host(net.runner, h, TransportSettings(cc=cc),
                                     host_interfaces(h))
            assert applied["sysctl"]["net.ipv4.tcp_congestion_control"] == cc
        rows = run_bulk(net, tmp_path / cc, seconds=6.0)
        print("FIGURES", cc, "samples", len(rows), "max cwnd", max(r["cwnd"] for r in rows))
        # each sample starts `ss` afresh: 0.3-1 s apart in a software-emulated VM
        assert len(rows) >= 2, len(rows)
        seen[cc] = {r["cc"] for r in rows}
        assert max(r["cwnd"] for r in rows) > 10
    assert seen == {"reno": {"reno"}, "cubic": {"cubic"}}


def test_buffer_caps_are_per_host(make_network) -> None:
    net = make_network(PairTopo(shape=SHAPE))
    applied = apply_tcp(net.runner, net.host("h2"), rmem=65536, wmem=131072)
    assert applied["net.ipv4.tcp_rmem"] == "4096 65536 65536"
    assert applied["net.ipv4.tcp_wmem"] == "4096 16384 131072"
    other = net.runner.run(["sysctl", "-n", "net.ipv4.tcp_rmem"], host=net.host("h1")).stdout
    assert other.split()[-1] != "65536"


def test_unknown_cc_is_refused_and_no_network_is_left(tmp_path: Path) -> None:
    runner = CommandRunner()
    net = Network(PairTopo(shape=SHAPE), runner=runner, workdir=tmp_path)
    with pytest.raises(UnsupportedError) as err, net:
        h1 = net.host("h1")
        configure_host(runner, h1, TransportSettings(cc="nosuchcc"), host_interfaces(h1))
    msg = str(err.value)
    assert "nosuchcc" in msg and "available:" in msg
    for cc in available_ccs(runner):
        assert cc in msg
    assert err.value.exit_code == 2
    assert net.manifest.netns, "the network never started"
    assert pids_in_netns(set(net.manifest.netns.values())) == []
    for pid in net.manifest.hosts.values():
        assert not Path(f"/proc/{pid}").exists()
