"""One network, several runs (`Network.end_run` / `begin_run`, `testbed.run.reuse`), for real.

1. On a k=2 fat-tree under a real os-ken controller: `end_run` ends the run's processes,
   stops its controller and deletes its nftables tables; `begin_run` puts back a link a
   schedule changed, flushes the hosts' TCP metrics cache (filled by a real transfer) and
   has a new controller re-program every switch (traffic flows again).
2. ``testbed run`` of a 4-run sweep (controller kind x 2 repetitions) builds one network:
   runs 2-4 say so in their metadata, every run completes with its flow finished, each
   transcript has its own controller start and cache flushes, the final stop reports no
   error, and nothing of the network is left when the command exits.
3. On a two-path network with a host baseline: a real MPTCP configuration (endpoints,
   limits, routes, a receive buffer, another congestion control) is put back by
   `end_run`, and ``testbed run`` of an MPTCP / TCP / MPTCP sweep with a link schedule
   builds one network: the MPTCP runs configure their subflows again, and each run starts
   with the link its predecessor's schedule slowed back at its configured rate.

    testbed vm -- .venv/bin/pytest -m integration -s tests/integration/test_network_reuse.py
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from controllers.launcher import ControllerProcess
from testbed.core.commands import CommandRunner
from testbed.net.cleanup import parse_link_names
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


SPEC = """
name = "itreuse"
duration = "6s"
seed = 3
repetitions = 2
stop_when_done = true

[topology]
kind = "fattree"
k = 2
bw = "10Mbit"

[controller]
kind = "single-path"

[transport]
protocol = "tcp"
cc = "reno"

[[workload]]
kind = "bulk"
src = "S0"
dst = "S1"
size = "300KB"

[sampler]
enabled = false

[sweep]
"controller.kind" = ["single-path", "ecmp"]
"""


def run_sweep_cli(spec_text: str, tmp_path: Path, timeout: float) -> tuple[Path, list]:
    """``testbed run`` of a spec as a user would; (output folder, metadata in run order)."""
    spec = tmp_path / "spec.toml"
    spec.write_text(spec_text)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(spec), "--out",
                          str(out), "--no-vm"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=timeout)
    assert res.returncode == 0, res.stderr[-3000:]
    metas = sorted((json.loads(p.read_text()) for p in out.glob("*/metadata.json")),
                   key=lambda m: m["t_started"])
    return out, metas


def test_a_sweep_builds_one_network_for_all_its_runs(tmp_path):
    out, metas = run_sweep_cli(SPEC, tmp_path, timeout=1200)
    assert [m["status"] for m in metas] == ["complete"] * 4
    first = metas[0]["run_id"]
    assert [m["network"]["reused"] for m in metas] == [False, True, True, True]
    assert {m["network"]["built_by"] for m in metas} == {first}
    # each run left the network for a next one; the sweep's end stopped it (checked below)
    assert all(m["network_cleanup"] == {"kept_for_next_run": True} for m in metas)
    teardown = json.loads((out / "_network-teardown.json").read_text())
    assert "errors" not in teardown, teardown
    assert not (out / "_kept-network.json").exists()
    for m in metas:
        assert m["flows"]["count"] == 1 and m["flows"]["failed"] == 0, m["flows"]
        transcript = (out / m["run_id"] / "transcript.jsonl").read_text()
        assert "controllers" in transcript  # each run started its own controller
    for m in metas[1:]:
        transcript = (out / m["run_id"] / "transcript.jsonl").read_text()
        assert "tcp_metrics" in transcript
    setups = [m["timing"]["set-up"] for m in metas]
    print(f"\nFIGURES reuse set-up s: {setups}")
    runner = CommandRunner()
    bridges = runner.run(["ovs-vsctl", "--timeout=30", "list-br"]).stdout.split()
    assert not set(bridges) & set(SWITCHES)
    links = set(parse_link_names(runner.run(["ip", "-o", "link", "show"]).stdout))
    assert not any(name.startswith(SWITCHES) for name in links)


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


MP_SPEC = """
name = "mp-reuse"
duration = "3s"
[topology]
kind = "multipath"
paths = [{ name = "wifi", bw = "5Mbit", delay = "5ms" },
         { name = "cell", bw = "5Mbit", delay = "20ms" }]
[[schedule]]
at = "1s"
link = "cell"
bw = "2Mbit"
[transport]
protocol = "mptcp"
cc = "cubic"
[[workload]]
name = "w"
kind = "bulk"
src = "client"
dst = "server"
[sweep]
"workload.0" = [
  { name = "mp", kind = "bulk", src = "client", dst = "server", protocol = "mptcp" },
  { name = "tcp", kind = "bulk", src = "client", dst = "server", protocol = "tcp", via = "wifi" },
  { name = "mpr", kind = "bulk", src = "client", dst = "server", protocol = "mptcp", cc = "reno" },
]
"""


def test_an_mptcp_and_tcp_sweep_shares_one_multipath_network(tmp_path):
    out, metas = run_sweep_cli(MP_SPEC, tmp_path, timeout=900)
    assert [m["status"] for m in metas] == ["complete"] * 3
    assert [m["network"]["reused"] for m in metas] == [False, True, True]
    teardown = json.loads((out / "_network-teardown.json").read_text())
    assert "errors" not in teardown, teardown
    for m, proto in zip(metas, ("mptcp", "tcp", "mptcp"), strict=True):
        assert m["flows"]["failed"] == 0, m["flows"]
        client = m["transport"]["client"]
        assert client["protocol"] == proto
        if proto == "mptcp":  # its own subflow endpoint, configured again
            assert client["endpoints"] and client["limits"], client
        # every run left the client as the network found it (or it would not be kept)
        assert m["network_cleanup"] == {"kept_for_next_run": True}
        # the previous run's schedule slowed "cell" to 2 Mbit/s; each run starts at 5 again
        assert m["links"]["cell"]["shape"]["bw_bps"] == 5_000_000, m["links"]["cell"]
        events = (out / m["run_id"] / "samples" / "events.jsonl").read_text()
        assert "cell" in events  # and its own schedule ran
    print(f"\nFIGURES multipath reuse set-up s: {[m['timing']['set-up'] for m in metas]}")
