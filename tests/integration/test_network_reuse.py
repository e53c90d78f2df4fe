"""One network, several runs (`Network.end_run` / `begin_run`, `testbed.run.reuse`), for real.

1. On a k=2 fat-tree under a real os-ken controller: `end_run` ends the run's processes,
   stops its controller and deletes its nftables tables; `begin_run` puts back a link a
   schedule changed, flushes the hosts' TCP metrics cache (filled by a real transfer) and
   has a new controller re-program every switch (traffic flows again).
2. (A study's runs building one fat-tree network through the command line, each with
   its own controller, are checked on the P1 study's runs:
   tests/integration/test_reproduce_studies.py.)
3. On a two-path network with a host baseline: a real MPTCP configuration (endpoints,
   limits, routes, a receive buffer, another congestion control) is put back by
   `end_run`.  MPTCP and TCP runs sharing a multipath network through ``testbed run``
   are checked on the P0 study's runs (tests/integration/test_reproduce_studies.py).

    testbed vm -- .venv/bin/pytest -m integration -s tests/integration/test_network_reuse.py
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from controllers.launcher import ControllerProcess
from testbed.core.commands import CommandRunner
from testbed.net.nftables import parse_nft_tables
from testbed.net.shaping import LinkShape
from topologies.fattree import FatTreeTopo

pytestmark = [pytest.mark.integration, pytest.mark.needs_kernel("netem", "ovs", "nft")]

REPO = Path(__file__).resolve().parents[2]
SWITCHES = ("A0", "A1", "C0", "E0", "E1")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tcp_metrics(runner: CommandRunner, host) -> str:
    return runner.run(["ip", "tcp_metrics", "show"], host=host).stdout.strip()


def test_end_run_and_begin_run_reset_what_a_run_leaves(make_network, runner, measure,
                                                         tmp_path):
    topo = FatTreeTopo(2, bw=10)
    port = free_port()
    first = ControllerProcess("single_path", topo, port=port, runner=runner,
                              log=tmp_path / "c1.log")
    net = make_network(topo, controller=first, ready_timeout=300)
    s0, s1 = net.host("S0"), net.host("S1")
    dst = s1.IP()
    net.add_nft_table("netdev", "tbreuse", "")
    measure.iperf3(runner, s0, s1, dst, seconds=2, omit=0)
    assert dst in tcp_metrics(runner, s0)  # the kernel cached the connection's metrics
    stray = runner.spawn(["sleep", "600"], host=s0)
    net.set_shape("S0-E0", LinkShape(bw_bps=1_000_000, queue_pkts=1000))

    net.end_run()
    assert not first.proc.running() and not stray.running()
    tables = parse_nft_tables(runner.run(["nft", "list", "tables"]).stdout)
    assert ("netdev", "tbreuse") not in tables
    assert json.loads((net.workdir / "network.json").read_text())["nft_tables"] == []

    run2 = CommandRunner()
    second = ControllerProcess("ecmp", topo, port=port, runner=run2, log=tmp_path / "c2.log")
    net.begin_run(run2, second, tmp_path / "run2")
    try:
        assert (tmp_path / "run2" / "network.json").exists()
        assert net.link("S0-E0").shape == LinkShape(bw_bps=10_000_000)
        assert "rate 10Mbit" in net.tc_dump()["S0-eth0"]
        assert tcp_metrics(run2, s0) == ""
        assert len(second.ready_at) == len(SWITCHES)
        out = run2.run(["ping", "-c", "3", "-i", "0.2", "-W", "2", dst], host=s0,
                       check=False)
        assert out.returncode == 0, out.stdout
        cmds = [" ".join(e.argv) for e in run2.transcript.entries]
        assert any("tcp_metrics flush all" in c for c in cmds)
    finally:
        run2.stop_all()


def test_end_run_puts_back_what_an_mptcp_run_configured(make_network, runner):
    from testbed.host.mptcp import TransportSettings, configure_host, host_interfaces
    from testbed.net.hoststate import differences, read_state
    from testbed.spec.model import PathSpec, Transport
    from topologies.multipath import MultiHomedTopo

    topo = MultiHomedTopo(paths=[PathSpec(name="wifi", bw=10_000_000, delay=0.005),
                                 PathSpec(name="cell", bw=10_000_000, delay=0.005)])
    net = make_network(topo, baseline_hosts=True)
    client = net.host("client")
    base = net.baseline.states["client"]
    transport = Transport(protocol="mptcp", cc="reno", rmem="64KiB")
    configure_host(runner, client, TransportSettings.from_spec(transport),
                   host_interfaces(client), role="client")
    keys = net.baseline.keys
    changed = differences(base, read_state(runner, client, keys))
    assert any("MPTCP endpoints" in d for d in changed), changed
    assert any("tcp_congestion_control" in d for d in changed), changed
    net.end_run()
    assert differences(base, read_state(runner, client, keys)) == []
    net.begin_run(runner)
