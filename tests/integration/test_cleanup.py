"""A network stopped by normal exit, an exception, SIGINT or SIGTERM leaves nothing
behind: compares `ip -o link`, `ip netns`, `ovs-vsctl list-br`, `tc qdisc show`,
`nft list tables` and the process list before and after (tests/leftovers.py; the
20-switch fat tree of test_fattree_controllers.py is checked the same way when it stops)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from leftovers import assert_same, snapshot

from testbed.core.commands import CommandRunner

pytestmark = [pytest.mark.integration, pytest.mark.needs_kernel("netem", "ovs")]

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import sys, time
from pathlib import Path
from testbed.core.commands import CommandRunner, which
from testbed.net.network import Network
from testbed.net.shaping import LinkShape
from testbed.spec.model import PathSpec, ScheduleEvent
from topologies.multipath import MultiHomedTopo
from topologies.pair import PairTopo

mode, workdir = sys.argv[1], Path(sys.argv[2])
runner = CommandRunner()
if mode == "sigint":  # the full case: OVS bridges, a router, nftables, a schedule
    topo = MultiHomedTopo(paths=[PathSpec(name="a", bw=5_000_000, delay=0.01),
                                 PathSpec(name="b", bw=2_000_000, delay=0.03)])
    server, dst, link = "server", topo.server_addr(), "a"
else:  # lighter (a loaded VM is slow to start OVS networks)
    topo = PairTopo(shape=LinkShape(bw_bps=5_000_000, delay_s=0.01))
    server, dst, link = "h2", "10.0.0.2", "link"
client = "client" if server == "server" else "h1"
with Network(topo, runner=runner, workdir=workdir) as net:
    runner.spawn(["iperf3", "-s"], host=net.host(server))
    time.sleep(0.5)
    runner.spawn(["iperf3", "-c", dst, "-t", "600"], host=net.host(client))
    net.host(client).popen(["sleep", "600"])  # not through the runner: found by netns
    net.play([ScheduleEvent(at=300.0, link=link, bw=1_000_000)])
    if mode == "sigint" and which("nft"):
        net.add_nft_table("netdev", "tb_cleanup_test",
                          'chain c { type filter hook ingress device "s1-eth1" priority 0; }')
    print("READY", flush=True)
    if mode == "exception":
        raise RuntimeError("boom")
    if mode in ("sigint", "sigterm"):
        time.sleep(600)
print("DONE", flush=True)
"""


@pytest.mark.parametrize("mode", ["normal", "exception", "sigint", "sigterm"])
def test_no_leftovers(mode: str, runner: CommandRunner, tmp_path: Path) -> None:
    before = snapshot(runner)
    child = subprocess.Popen([sys.executable, "-c", CHILD, mode, str(tmp_path)], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        assert line.strip() == "READY", line + child.stderr.read()
        if mode in ("sigint", "sigterm"):
            time.sleep(1.0)
            child.send_signal(signal.SIGINT if mode == "sigint" else signal.SIGTERM)
        rc = child.wait(600)
    finally:
        if child.poll() is None:
            child.kill()
    err = child.stderr.read()
    expected = {"normal": {0}, "exception": {1}, "sigint": {1, 130, -signal.SIGINT},
                "sigterm": {143}}[mode]
    assert rc in expected, err[-2000:]
    assert_same(before, snapshot(runner))
    assert (tmp_path / "network.json").exists()
