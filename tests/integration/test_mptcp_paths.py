"""MPTCP over two paths (10 Mbit/s 10 ms, 10 Mbit/s 40 ms one-way) vs TCP on the better one.

Done-when figures of issue 5: two subflows carry data (``ss`` in the sender and the
pcaps of both client interfaces) and aggregate goodput >= 1.6 x TCP on the better path,
measured in the same test.  Also: two subflows over one interface pair
(``subflows_per_path = 2``), iperf3 through ``mptcpize run``, and a clear refusal of a
packet scheduler on kernels without ``net.mptcp.scheduler``.

Set ``TRANSPORT_CAPTURE_OUT=<dir>`` to keep the raw tool output (ss, iperf3 JSON) there.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.core.commands import CommandRunner
from testbed.core.errors import UnsupportedError
from testbed.host.capture import CaptureSet
from testbed.host.mptcp import configure_host, host_interfaces
from testbed.host.sampler import Sampler, parse_ss
from testbed.host.traffic.flows import FlowRun
from testbed.host.traffic.iperf import IperfRun
from testbed.net.network import Network
from testbed.plan import patterns
from testbed.plan.flows import resolve_flows
from testbed.plan.transport import TransportSettings
from testbed.spec.model import PathSpec
from topologies.multipath import MultiHomedTopo

pytestmark = [pytest.mark.integration, pytest.mark.needs_kernel("netem", "ovs", "mptcp")]

PATHS = [PathSpec(name="fast", bw=10_000_000, delay=0.010, queue=100),
         PathSpec(name="slow", bw=10_000_000, delay=0.040, queue=100)]
SECONDS = 8.0


def keep(src: Path, name: str) -> None:
    """Copy raw output to $TRANSPORT_CAPTURE_OUT (for tests/data/transport)."""
    out = os.environ.get("TRANSPORT_CAPTURE_OUT")
    if out and src.exists():
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(src, Path(out) / name)


def keep_text(text: str, name: str) -> None:
    out = os.environ.get("TRANSPORT_CAPTURE_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / name).write_text(text)


def _missing(runner: CommandRunner) -> str | None:
    """Why the module's network cannot start here (checked before it is built)."""
    if os.geteuid() != 0:
        return "needs root (run: testbed vm -- .venv/bin/pytest -m integration ...)"
    for mod in ("sch_netem", "openvswitch"):
        if not (Path(f"/sys/module/{mod}").exists()
                or runner.ok(["modprobe", "-q", mod], record=False)):
            return f"kernel lacks {mod} (run in `testbed vm`)"
    if not runner.ok(["ovs-vsctl", "--timeout=5", "show"], record=False):
        return "ovs-vswitchd is not running (use `testbed vm`)"
    return None


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Network]:
    runner = CommandRunner()
    why = _missing(runner)
    if why:
        pytest.skip(why)
    with Network(MultiHomedTopo(paths=PATHS), runner=runner,
                 workdir=tmp_path_factory.mktemp("mptcp")) as n:
        yield n
    runner.stop_all()


def configure(net: Network, **kw) -> dict:
    ts = TransportSettings(protocol="mptcp", **kw)
    out = {}
    for name, role in (("client", "client"), ("server", "server")):
        h = net.host(name)
        out[name] = configure_host(net.runner, h, ts, host_interfaces(h), role=role)
    return out


def bundle(tmp_path: Path) -> tuple[Path, Path, Path]:
    dirs = tuple(tmp_path / d for d in ("samples", "logs", "pcap"))
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    return dirs  # type: ignore[return-value]


def data_packets(runner: CommandRunner, pcap: Path, dport: int) -> int:
    """TCP segments with payload towards dport in pcap (tshark)."""
    out = runner.run(["tshark", "-r", str(pcap), "-n", "-Y",
                      f"tcp.dstport == {dport} && tcp.len > 0", "-T", "fields", "-e",
                      "frame.number"], timeout=120).stdout
    return len(out.split())


def goodput(rec: dict) -> float:
    return rec["bytes_received"] * 8 / (rec["end"] - rec["t_connected"])


def test_mptcp_two_paths_beat_tcp_on_the_better_path(net: Network, tmp_path: Path) -> None:
    applied = configure(net)
    print("APPLIED", json.dumps(applied))
    assert [e["dev"] for e in applied["client"]["endpoints"]] == ["client-eth1"]
    runner, client, server = net.runner, net.host("client"), net.host("server")
    samples, logs, pcap = bundle(tmp_path)
    flows = (patterns.one_to_one("tcpfast", "client", "server", protocol="tcp",
                                 duration=SECONDS, via="fast")
             + patterns.one_to_one("mptcp", "client", "server", protocol="mptcp",
                                   duration=SECONDS, start=SECONDS + 2))
    flows = resolve_flows(flows, {"server": net.topo.server_addr()},
                          {("client", p.name): net.topo.path(p.name).client_addr
                           for p in PATHS})
    caps = CaptureSet(runner, pcap, logs)
    caps.add(client, "client-eth0")
    caps.add(client, "client-eth1")
    caps.start()
    fr = FlowRun(runner, {"client": client, "server": server}, flows, samples, logs)
    sampler = Sampler(runner, client, samples, interval=0.05, ports=set(fr.servers.values()))
    try:
        sampler.start()
        fr.start()
        time.sleep(max(0.0, fr.t0 + SECONDS + 2 + SECONDS / 2 - time.time()))
        ss_mai = runner.run(["ss", "-Mai"], host=client).stdout
        ss_tin = runner.run(["ss", "-tinM"], host=client).stdout
        assert fr.wait(timeout=3 * SECONDS + 30)
    finally:
        fr.stop()
        stats = sampler.stop()
        caps.stop()
    keep_text(ss_mai, "ss_Mai_client_mptcp_2paths.txt")
    keep_text(ss_tin, "ss_tinM_client_mptcp_2paths.txt")
    recs = {r["workload"]: r for r in fr.collect()}
    print("RECORDS", json.dumps(recs))
    assert all(r["error"] is None for r in recs.values()), recs
    tcp, mp = recs["tcpfast"], recs["mptcp"]
    assert tcp["src_addr"] == net.topo.path("fast").client_addr
    assert mp["mptcp_fallback"] is False and mp["mptcp_subflows"] >= 1
    g_tcp, g_mp = goodput(tcp), goodput(mp)
    figures = {"tcp_fast_bps": g_tcp, "mptcp_bps": g_mp, "ratio": g_mp / g_tcp,
               "sampler": stats}
    print("FIGURES", json.dumps(figures))
    keep_text(json.dumps(figures, indent=1), "figures_mptcp_2paths.json")

    # the MPTCP socket in `ss -Mai`, and its two subflows (same token) carrying data
    msk = [e for e in parse_ss(ss_mai, netid="mptcp") if e["mptcp_token"] == mp["mptcp_token"]]
    assert msk and msk[0]["netid"] == "mptcp"
    subs = [e for e in parse_ss(ss_tin)
            if e["netid"] == "tcp" and e["mptcp_token"] == mp["mptcp_token"]]
    assert {s["src_addr"] for s in subs} == {"10.0.1.1", "10.0.2.1"}, subs
    rows = [json.loads(x) for x in (samples / "cwnd.jsonl").read_text().splitlines()]
    acked: dict[str, int] = {}
    for r in rows:
        if r["mptcp_token"] == mp["mptcp_token"]:
            acked[r["src_addr"]] = max(acked.get(r["src_addr"], 0), r["bytes_acked"] or 0)
    assert len(acked) == 2 and min(acked.values()) > 1_000_000, acked
    n0 = data_packets(runner, pcap / "client-client-eth0.pcap", mp["dport"])
    n1 = data_packets(runner, pcap / "client-client-eth1.pcap", mp["dport"])
    assert n0 > 1000 and n1 > 1000, (n0, n1)
    assert g_mp >= 1.6 * g_tcp, figures


def test_two_subflows_over_one_interface_pair(net: Network, tmp_path: Path) -> None:
    applied = configure(net, subflows_per_path=2)
    assert applied["client"]["limits"]["subflows"] == 3
    runner, client, server = net.runner, net.host("client"), net.host("server")
    samples, logs, _ = bundle(tmp_path)
    flows = resolve_flows(patterns.one_to_one("mp4", "client", "server", protocol="mptcp",
                                              duration=4.0),
                          {"server": net.topo.server_addr()})
    fr = FlowRun(runner, {"client": client, "server": server}, flows, samples, logs,
                 base_port=5101)
    try:
        fr.start()
        ss = ""
        # the flow starts late in a slow VM: poll until one connection has four subflows
        # that have each carried data (a snapshot taken the moment the fourth subflow is
        # established shows it with nothing acked yet)
        deadline = time.time() + 20
        while time.time() < deadline:
            ss = runner.run(["ss", "-tinM"], host=client, record=False).stdout
            busy = Counter(e["mptcp_token"] for e in parse_ss(ss)
                           if e["netid"] == "tcp" and e["mptcp_token"]
                           and (e["bytes_acked"] or 0) > 10_000)
            if busy and max(busy.values()) >= 4:
                break
            time.sleep(0.2)
        assert fr.wait(timeout=30)
    finally:
        fr.stop()
        configure(net)  # back to one subflow per path for the other tests
    keep_text(ss, "ss_tinM_client_2_per_path.txt")
    rec = fr.collect()[0]
    assert rec["error"] is None
    subs = [e for e in parse_ss(ss) if e["netid"] == "tcp"
            and e["mptcp_token"] == rec["mptcp_token"]]
    nets = [str(ipaddress.ip_interface(f"{s['src_addr']}/24").network) for s in subs]
    assert sorted(nets) == ["10.0.1.0/24", "10.0.1.0/24", "10.0.2.0/24", "10.0.2.0/24"], subs
    assert all((s["bytes_acked"] or 0) > 10_000 for s in subs), subs


def test_iperf3_through_mptcpize(net: Network, tmp_path: Path) -> None:
    configure(net)
    samples, logs, _ = bundle(tmp_path)
    ir = IperfRun(net.runner, net.host("client"), net.host("server"),
                  net.topo.server_addr(), samples, logs, name="bulk", protocol="mptcp",
                  duration=6, port=5301)
    try:
        ir.start()
        assert ir.wait(timeout=40)
    finally:
        ir.stop()
    keep(ir.report, "iperf3_mptcpize_client.json")
    rec = ir.collect()
    assert rec["error"] is None, rec
    print("FIGURES iperf3 mptcp goodput", rec["goodput_bps"])
    assert rec["goodput_bps"] > 1.3 * 10_000_000 * 0.9, rec


def test_scheduler_refused_without_kernel_support(net: Network) -> None:
    if Path("/proc/sys/net/mptcp/scheduler").exists():
        pytest.skip("this kernel has net.mptcp.scheduler")
    with pytest.raises(UnsupportedError, match=r"6\.6"):
        configure(net, scheduler="redundant")
