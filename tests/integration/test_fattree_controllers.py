"""k=4 fat-tree (10 Mbit/s links) under each controller app, all on ONE network start.

The network starts with ``single_path``; each later test replaces the controller process
(same port): the switches reconnect and the new app wipes and re-installs their rules.
Per app: time until all 20 switches are programmed; all-pairs ping with 0 % loss; then
the forwarding policy seen in the switches' port counters:

- ``single_path``: one TCP flow S0 -> S15 leaves E0 on one uplink (the D-mod-k one);
- ``ecmp``: one TCP flow leaves E0 on one uplink; 8 concurrent flows from E0's hosts to
  other pods use both uplinks;
- ``spray``: one TCP flow's packets split over the uplinks of every decision switch it
  crosses (E0, A0, A1 forward; E7 for its ACKs): each uplink carries at least 30 %, and
  one chi-square test against uniform over all of them has p > 0.01.

When the network stops, nothing of it is left (links, namespaces, bridges, qdiscs,
nftables tables, processes: tests/leftovers.py).

Run (``-s`` prints a ``FIGURES`` line per app)::

    testbed vm -- .venv/bin/pytest -m integration -s tests/integration/test_fattree_controllers.py
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from leftovers import assert_same, snapshot

from controllers.launcher import ControllerProcess
from controllers.stats import chi2_sf, chi_square_uniform
from testbed.core.commands import CommandRunner, which
from testbed.net.cleanup import keep_ovs_state
from testbed.net.network import Network
from topologies.fattree import FatTreeTopo

pytestmark = [pytest.mark.integration, pytest.mark.needs_kernel("netem", "ovs", "nft")]

BW_MBIT = 10
FLOW_S = 4
READY_TIMEOUT = 600.0
FIGURES = (Path(__file__).resolve().parents[2] / "results" / "ci-figures"
           / "fattree-controllers.json")  # figures for the closing notes


class SwappableController:
    """The `Network` controller hook around a `ControllerProcess` that can be replaced."""

    protocols = "OpenFlow13"

    @property
    def inactivity_probe_ms(self) -> int | None:
        return self.current.inactivity_probe_ms

    def __init__(self, app: str, topo: Any, port: int, logdir: Path, runner: CommandRunner):
        self.topo, self.port, self.logdir, self.runner = topo, port, logdir, runner
        self.current = self._make(app)
        self.net: Any = None
        self.dpids: list[int] = []

    def _make(self, app: str) -> ControllerProcess:
        return ControllerProcess(app, self.topo, port=self.port, runner=self.runner,
                                 log=self.logdir / f"controller-{app}.log",
                                 start_timeout=READY_TIMEOUT)

    def start(self) -> None:
        self.current.start()

    def pre_switch_start(self, net: Any) -> None:
        self.net = net
        self.current.pre_switch_start(net)

    def wait_ready(self, dpids: Sequence[int], timeout: float) -> dict[int, float]:
        self.dpids = list(dpids)
        return self.current.wait_ready(dpids, timeout)

    def post_switch_start(self, net: Any) -> None:
        self.current.post_switch_start(net)

    def check_alive(self) -> None:
        self.current.check_alive()

    def stop(self) -> None:
        self.current.stop()

    def swap(self, app: str) -> float:
        """Replace the running app; return seconds until every switch is re-programmed."""
        self.current.stop()
        self.current = self._make(app)
        t0 = time.time()
        self.current.start()
        self.current.pre_switch_start(self.net)
        ready = self.current.wait_ready(self.dpids, READY_TIMEOUT)
        self.current.post_switch_start(self.net)
        return max(ready.values()) - t0


@dataclass
class Fabric:
    net: Network
    ctl: SwappableController
    runner: CommandRunner
    workdir: Path
    figures: dict[str, dict] = field(default_factory=dict)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def why_skip(runner: CommandRunner) -> str | None:
    """The reason this machine cannot run the test (module-scoped, so checked here)."""
    if os.geteuid() != 0:
        return "needs root (run: testbed vm -- .venv/bin/pytest -m integration ...)"
    for tool in ("mnexec", "ovs-vsctl", "nft", "iperf3", "tc"):
        if which(tool) is None:
            return f"{tool} is not installed (scripts/install)"
    for mod in ("openvswitch", "sch_netem"):
        if not (Path(f"/sys/module/{mod}").exists()
                or runner.ok(["modprobe", "-q", mod], record=False)):
            return f"kernel lacks {mod} (run in `testbed vm`)"
    if not runner.ok(["ovs-vsctl", "--timeout=5", "show"], record=False):
        return "ovs-vswitchd is not running"
    return None


@pytest.fixture(scope="module")
def fabric() -> Iterator[Fabric]:
    runner = CommandRunner()
    reason = why_skip(runner)
    if reason:
        pytest.skip(reason)
    # under the checkout, not /tmp: the VM's /tmp is gone when it exits, and the controller
    # logs are what explains a switch that was never programmed
    workdir = FIGURES.parent / "fattree-run"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    before = snapshot(runner)  # what a network could leave behind (tests/leftovers.py)
    topo = FatTreeTopo(4, bw=BW_MBIT)
    ctl = SwappableController("single_path", topo, free_port(), workdir, runner)
    net = Network(topo, runner=runner, controller=ctl, workdir=workdir / "net",
                  ready_timeout=READY_TIMEOUT)
    t0 = time.time()
    net.start()  # a failed start keeps OVS's state in workdir/net (keep_ovs_state)
    fab = Fabric(net, ctl, runner, workdir)
    fab.figures["single_path"] = {
        "programmed_s": round(max(ctl.current.ready_at.values()) - t0, 1),
        "network_up_s": round(time.time() - t0, 1),
        "controller_restarts": len(ctl.current.restarts)}
    try:
        yield fab
    finally:
        keep_ovs_state(runner, workdir)
        for sw in ("E0", "A0", "C0"):  # kept with the test's files, for diagnosis
            for what in ("dump-flows", "dump-groups", "dump-ports"):
                res = runner.run(["ovs-ofctl", "-O", "OpenFlow13", what, sw], check=False)
                (workdir / f"{sw}-{what}.txt").write_text(res.stdout + res.stderr)
        net.stop()
        runner.stop_all()
        print("\nFIGURES " + json.dumps(fab.figures, sort_keys=True))
        FIGURES.parent.mkdir(parents=True, exist_ok=True)  # for the closing notes
        FIGURES.write_text(json.dumps(fab.figures, indent=1, sort_keys=True) + "\n")
        # the 20 switches, 16 hosts and every controller stopped leave nothing behind
        assert_same(before, snapshot(runner))


def use(fab: Fabric, app: str) -> dict:
    """Make app the running controller (unless it already is); return its figures dict."""
    figs = fab.figures.setdefault(app, {})
    if fab.ctl.current.app != app:
        figs["reprogrammed_s"] = round(fab.ctl.swap(app), 1)
        figs["controller_restarts"] = len(fab.ctl.current.restarts)
    assert len(fab.ctl.current.ready_at) == 20
    return figs


def tx_packets(intf: str) -> int:
    """Transmitted packets of a switch port (root namespace)."""
    return int(Path(f"/sys/class/net/{intf}/statistics/tx_packets").read_text())


def uplinks(switch: str) -> dict[str, int]:
    return {f"{switch}-eth{p}": tx_packets(f"{switch}-eth{p}") for p in (3, 4)}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in before}


def ping_all_pairs(fab: Fabric, tag: str, parallel: int = 4) -> dict:
    """Every host pings every other host twice, ``parallel`` source loops at a time (more
    overloads a 2-CPU TCG VM; a late echo reply counts as lost)."""
    layout = fab.ctl.current.routes.layout
    script = ('for ip in "$@"; do ping -n -q -c 2 -i 0.2 -W 5 "$ip" | sed -n '
              '"s/^\\([0-9]*\\) packets transmitted, \\([0-9]*\\) rec.*/$ip \\1 \\2/p"; done')
    hosts = list(layout.hosts)
    for i in range(0, len(hosts), parallel):
        procs = []
        for src in hosts[i:i + parallel]:
            dsts = [h.ip for h in layout.hosts if h.name != src.name]
            procs.append(fab.runner.spawn(["sh", "-c", script, "sh", *dsts],
                                          host=fab.net.host(src.name),
                                          stdout=fab.workdir / f"ping-{tag}-{src.name}.txt"))
        for p in procs:
            p.wait(timeout=600)
            p.stop()
    out = {"pairs": 0, "sent": 0, "received": 0, "failed": []}
    for src in layout.hosts:
        for line in (fab.workdir / f"ping-{tag}-{src.name}.txt").read_text().splitlines():
            ip, tx, rx = line.split()
            out["pairs"] += 1
            out["sent"] += int(tx)
            out["received"] += int(rx)
            if int(rx) < int(tx):
                out["failed"].append(f"{src.name}->{ip}")
    return out


def tcp_flows(fab: Fabric, flows: list[tuple[str, str, str]], tag: str) -> list[dict]:
    """Run concurrent iperf3 TCP flows (src host, dst host, dst ip) for FLOW_S seconds."""
    servers, clients = [], []
    for i, (_src, dst, _ip) in enumerate(flows):
        servers.append(fab.runner.spawn(["iperf3", "-s", "-1", "-p", str(5201 + i)],
                                        host=fab.net.host(dst),
                                        log=fab.workdir / f"iperf3-{tag}-s{i}.log"))
    time.sleep(1.0)
    for i, (src, _dst, ip) in enumerate(flows):
        clients.append(fab.runner.spawn(
            ["iperf3", "-c", ip, "-p", str(5201 + i), "-t", str(FLOW_S), "-J"],
            host=fab.net.host(src), stdout=fab.workdir / f"iperf3-{tag}-c{i}.json"))
    results = []
    for i, c in enumerate(clients):
        c.wait(timeout=FLOW_S + 300)
        c.stop()
        results.append(json.loads((fab.workdir / f"iperf3-{tag}-c{i}.json").read_text()))
    for s in servers:
        s.stop()
    return results


def one_flow(fab: Fabric, figs: dict, watch: Sequence[str]) -> dict[str, dict[str, int]]:
    """One TCP flow S0 -> S15 (pod 0 -> pod 3); uplink packet counts per watched switch."""
    before = {sw: uplinks(sw) for sw in watch}
    res = tcp_flows(fab, [("S0", "S15", "10.3.1.3")], fab.ctl.current.app)
    counts = {sw: delta(before[sw], uplinks(sw)) for sw in watch}
    figs["one_flow_mbit"] = round(res[0]["end"]["sum_received"]["bits_per_second"] / 1e6, 2)
    figs["one_flow_uplink_packets"] = counts
    assert sum(counts[watch[0]].values()) > 500, counts
    return counts


def reachability(fab: Fabric, figs: dict) -> dict:
    """Ping all pairs; the caller asserts with `assert_reachable` after its other checks."""
    pings = ping_all_pairs(fab, fab.ctl.current.app)
    figs["ping"] = {k: v for k, v in pings.items() if k != "failed"}
    figs["ping_failed"] = pings["failed"]
    return pings


def assert_reachable(pings: dict) -> None:
    assert pings["pairs"] == 240, pings
    assert pings["failed"] == [] and pings["received"] == pings["sent"], pings["failed"][:10]


def test_single_path(fabric: Fabric) -> None:
    figs = use(fabric, "single_path")
    pings = reachability(fabric, figs)
    counts = one_flow(fabric, figs, ["E0", "A1"])
    # D-mod-k: S15 is host 15 -> E0 takes ports[15 % 2] = 4 (to A1), A1 ports[7 % 2] = 4
    e0, a1 = counts["E0"], counts["A1"]
    assert e0["E0-eth4"] >= 0.99 * sum(e0.values()), e0
    assert a1["A1-eth4"] >= 0.99 * sum(a1.values()), a1
    assert_reachable(pings)
    fabric.ctl.check_alive()


def test_single_path_keeps_every_flow_in_order(fabric: Fabric) -> None:
    """Issue 16: under single-path forwarding (which cannot reorder a flow) a long TCP
    flow and short flows arrive in their sender's order: at most 0.1 % of the data
    segments sent once arrive after a segment sent later, counted from captures at each
    sender and receiver (`analysis.order`)."""
    from analysis.capture import CaptureAnalysis
    from analysis.order import between_captures
    from testbed.host.capture import CaptureSet

    figs = use(fabric, "single_path")
    pdir = fabric.workdir / "order-single-path"
    shutil.rmtree(pdir, ignore_errors=True)
    hosts = ("S0", "S1", "S4", "S14", "S15")
    caps = CaptureSet(fabric.runner, pdir, pdir, 128)
    files = {h: caps.add(fabric.net.host(h), f"{h}-eth0").path for h in hosts}
    caps.start()
    try:
        # one long flow and three short ones at once, across pods and within one
        long_ = fabric.runner.spawn(["iperf3", "-s", "-1", "-p", "5301"],
                                    host=fabric.net.host("S15"))
        shorts = [fabric.runner.spawn(["iperf3", "-s", "-1", "-p", str(5302 + i)],
                                      host=fabric.net.host(dst))
                  for i, dst in enumerate(("S15", "S14", "S14"))]
        time.sleep(1.0)
        clients = [fabric.runner.spawn(["iperf3", "-c", "10.3.1.3", "-p", "5301", "-t",
                                        str(FLOW_S + 2)], host=fabric.net.host("S0"))]
        time.sleep(1.0)
        for i, (src, ip) in enumerate((("S1", "10.3.1.3"), ("S4", "10.3.1.2"),
                                       ("S1", "10.3.1.2"))):
            clients.append(fabric.runner.spawn(["iperf3", "-c", ip, "-p", str(5302 + i),
                                                "-n", "300K"], host=fabric.net.host(src)))
        for c in clients:
            c.wait(timeout=FLOW_S + 300)
            c.stop()
        for srv in [long_, *shorts]:
            srv.stop()
    finally:
        caps.stop()
    analysed = {h: CaptureAnalysis.of(files[h]) for h in hosts}
    flows: dict[str, tuple[int, int]] = {}
    for snd in ("S0", "S1", "S4"):
        for rcv in ("S14", "S15"):
            flows.update(between_captures(analysed[snd], analysed[rcv]))
    # the data connections (iperf3's control connections carry a handful of segments)
    data = {fid: c for fid, c in flows.items() if c[0] >= 20}
    counted = sum(c for c, _late in data.values())
    late = sum(late for _c, late in data.values())
    figs["order"] = {"flows": len(data), "segments": counted, "late": late,
                     "per_flow": {fid: list(c) for fid, c in data.items()}}
    assert len(data) == 4, flows
    assert counted > 1500, data
    for fid, (c, lt) in data.items():
        assert lt <= 0.001 * c, f"{fid}: {lt} of {c} segments arrived after a later one"


def test_ecmp(fabric: Fabric) -> None:
    figs = use(fabric, "ecmp")
    pings = reachability(fabric, figs)
    e0 = one_flow(fabric, figs, ["E0"])["E0"]
    assert max(e0.values()) >= 0.99 * sum(e0.values()), e0
    layout = fabric.ctl.current.routes.layout
    remote = [h for h in layout.hosts if layout.switch(h.switch).pod != 0][:8]
    flows = [(src, dst.name, dst.ip) for src, dst in zip(["S0", "S1"] * 4, remote, strict=True)]
    before = uplinks("E0")
    tcp_flows(fabric, flows, "ecmp8")
    eight = delta(before, uplinks("E0"))
    figs["eight_flows_uplink_packets"] = eight
    assert min(eight.values()) >= 0.05 * sum(eight.values()), eight
    assert_reachable(pings)
    fabric.ctl.check_alive()


def test_spray(fabric: Fabric) -> None:
    figs = use(fabric, "spray")
    assert len(fabric.ctl.current.nft_tables) == 16
    pings = reachability(fabric, figs)
    counts = one_flow(fabric, figs, ["E0", "A0", "A1", "E7"])
    figs["chi2_p"] = {}
    total_stat, total_dof = 0.0, 0
    for sw, per_port in counts.items():
        n = list(per_port.values())
        assert sum(n) >= 200, (sw, per_port)
        assert min(n) >= 0.3 * sum(n), (sw, per_port)  # every switch splits the flow
        stat, p = chi_square_uniform(n)
        figs["chi2_p"][sw] = round(p, 4)
        total_stat, total_dof = total_stat + stat, total_dof + len(n) - 1
    # one test over all decision switches: four separate tests at 0.01 would fail a
    # correct spray about 4 % of the time
    p_all = chi2_sf(total_stat, total_dof)
    figs["chi2_p_all"] = round(p_all, 4)
    assert p_all > 0.01, (counts, figs["chi2_p"])
    assert_reachable(pings)
    fabric.ctl.check_alive()
