"""A 2-path multi-homed network (10 Mbit/s 10 ms, 5 Mbit/s 40 ms): TCP bound to each
path reaches 90-105 % of its rate (a short first measurement is repeated once); the lowest
ping RTT per path within 10 % + 1 ms of configured."""

from __future__ import annotations

import statistics
from collections.abc import Iterator

import pytest

from testbed.core.commands import CommandRunner
from testbed.net.network import Network
from testbed.spec.model import PathSpec
from topologies.multipath import MultiHomedTopo

pytestmark = [pytest.mark.integration, pytest.mark.needs_kernel("netem", "ovs")]

PATHS = [PathSpec(name="wifi", bw=10_000_000, delay=0.010, queue=100),
         PathSpec(name="cell", bw=5_000_000, delay=0.040, queue=100)]


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Network]:
    runner = CommandRunner()
    with Network(MultiHomedTopo(paths=PATHS), runner=runner,
                 workdir=tmp_path_factory.mktemp("mp")) as n:
        yield n
    runner.stop_all()


@pytest.mark.parametrize("spec", PATHS, ids=lambda p: p.name)
def test_ping_rtt_per_path(net: Network, measure, spec: PathSpec) -> None:
    src = net.topo.path(spec.name).client_addr
    rtts = measure.ping(net.runner, net.host("client"), net.topo.server_addr(), count=15,
                        interval=0.1, source=src)
    got = [r for r in rtts if r is not None]
    assert len(got) == 15
    # the lowest RTT is the path's delay as shaped (what the run verdict judges too); a
    # slow emulating machine adds waiting for a CPU on top, which the median shows: it
    # read 23.2 and 24.3 ms on this 20 ms path in two CI runs whose machine ran 1.4x
    # slower than usual (docs/fidelity.md), so it is printed, not judged here
    lowest, median = min(got), statistics.median(got)
    want = spec.shape.rtt_s() * 1e3
    print(f"FIGURES {spec.name} ping: lowest {lowest:.2f} ms, median {median:.2f} ms, "
          f"configured {want:.1f} ms")
    assert abs(lowest - want) <= 0.1 * want + 1.0, \
        f"{spec.name}: lowest {lowest:.2f} ms (median {median:.2f}) vs {want} ms"


@pytest.mark.parametrize("spec", PATHS, ids=lambda p: p.name)
def test_tcp_per_path(net: Network, measure, spec: PathSpec) -> None:
    src = net.topo.path(spec.name).client_addr
    rate = spec.shape.bw_bps
    got = []
    # A second measurement only when the first falls short: under software emulation a
    # busy host can starve the sender for a second (28 % CPU steal was seen on a failing
    # run), which says nothing about the link; a link shaped too slow fails both.
    for _ in range(2):
        res = measure.iperf3(net.runner, net.host("client"), net.host("server"),
                             net.topo.server_addr(), seconds=8, omit=2, bind=src)
        got.append(res["end"]["sum_received"]["bits_per_second"])
        if got[-1] >= 0.90 * rate:
            break
    bps = max(got)
    assert 0.90 * rate <= bps <= 1.05 * rate, \
        f"{spec.name}: {', '.join(f'{b / 1e6:.2f}' for b in got)} Mbit/s"


def test_interface_map_and_path_interfaces(net: Network) -> None:
    imap = net.interface_map()
    assert imap["client-eth1"] == {"host": "client", "path": "cell", "addr": "10.0.2.1"}
    assert imap["server-eth0"]["path"] is None
    names = [p.intf for p in net.path_interfaces("wifi")]
    assert names == ["client-eth0", "router-eth0", "s1-eth1", "s1-eth2"]
    assert {e.intf for e in net.link("wifi").egress} == {"s1-eth1", "s1-eth2"}
