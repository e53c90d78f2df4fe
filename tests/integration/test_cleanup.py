"""A network stopped by normal exit, an exception, SIGINT or SIGTERM leaves nothing
behind: compares `ip -o link`, `ip netns`, `ovs-vsctl list-br`, `tc qdisc show`,
`nft list tables` and the process list before and after.  Also: a 20-switch topology
starts, forwards and stops cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mininet.topo import Topo

from testbed.core.commands import CommandRunner
from testbed.net.cleanup import parse_link_names
from testbed.net.network import Network

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


def snapshot(runner: CommandRunner) -> dict[str, object]:
    """What a network could leave behind, as comparable values."""
    procs = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if cmd:  # kernel threads have none
                procs.add((int(entry), cmd.split(b"\0")[0].decode(errors="replace")))
    nft = runner.run(["nft", "list", "tables"], check=False).stdout
    return {
        "links": sorted(parse_link_names(runner.run(["ip", "-o", "link", "show"]).stdout)),
        "netns": runner.run(["ip", "netns", "list"]).stdout,
        "bridges": runner.run(["ovs-vsctl", "list-br"]).stdout,
        "qdiscs": runner.run(["tc", "qdisc", "show"]).stdout,
        "nft": nft,
        "procs": procs,
    }


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None  # gone
    return int(stat.rsplit(")", 1)[1].split()[1])


def _left_behind(before: dict, after: dict) -> set[tuple[int, str]]:
    """New processes that could be ours: not the test itself, still alive, and not the
    child of a daemon that was already running (udevd forks workers for every veth the
    network creates; they exit on their own and were never the testbed's)."""
    me = os.getpid()
    daemons = {pid for pid, _ in before["procs"]} - {1, me}
    left = set()
    for pid, name in after["procs"] - before["procs"]:
        ppid = _ppid(pid)
        if pid != me and ppid is not None and ppid not in daemons:
            left.add((pid, name))
    return left


def assert_same(before: dict, after: dict) -> None:
    for key in ("links", "netns", "bridges", "qdiscs", "nft"):
        assert after[key] == before[key], f"{key} differ"
    new = _left_behind(before, after)
    assert not new, f"processes left behind: {sorted(new)}"


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


class LineTopo(Topo):
    """h1 - s1 - s2 - ... - sN - h2."""

    def build(self, n: int = 20, **_opts) -> None:
        self.addHost("h1", ip="10.9.0.1/24")
        self.addHost("h2", ip="10.9.0.2/24")
        prev = "h1"
        for i in range(1, n + 1):
            self.addSwitch(f"s{i}")
            self.addLink(prev, f"s{i}")
            prev = f"s{i}"
        self.addLink(prev, "h2")


def test_twenty_switches_start_forward_and_stop(runner: CommandRunner, tmp_path: Path,
                                                measure) -> None:
    before = snapshot(runner)
    with Network(LineTopo(n=20), runner=runner, workdir=tmp_path) as net:
        assert len(net.mn.switches) == 20
        rtts = measure.ping(runner, net.host("h1"), "10.9.0.2", count=3, interval=0.2)
        assert any(r is not None for r in rtts)
    assert_same(before, snapshot(runner))
