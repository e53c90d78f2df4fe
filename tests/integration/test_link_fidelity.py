"""Two hosts over one shaped link, measured with real ping and iperf3 (issue 2, item 7).

RTT within 10 % + 1 ms of 2 x 20 ms; TCP within 10 % of 10 Mbit/s without loss; loss at
5 % configured within the binomial 99 % interval; loss set back to 0 really is 0; and a
change keeps the qdiscs (their counters survive), i.e. nothing is re-created.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterator

import pytest

from testbed.core.commands import CommandRunner
from testbed.net.network import Network
from testbed.net.shaping import LinkShape
from topologies.pair import PairTopo

pytestmark = [pytest.mark.integration, pytest.mark.needs_kernel("netem")]

SHAPE = LinkShape(bw_bps=10_000_000, delay_s=0.020, queue_pkts=100)


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Network]:
    runner = CommandRunner()
    with Network(PairTopo(shape=SHAPE), runner=runner,
                 workdir=tmp_path_factory.mktemp("pair")) as n:
        yield n
    runner.stop_all()


@pytest.fixture(autouse=True)
def _reset(net: Network) -> None:
    net.set_shape("link", SHAPE)


def test_rtt_is_twice_the_one_way_delay(net: Network, measure) -> None:
    rtts = measure.ping(net.runner, net.host("h1"), "10.0.0.2", count=20, interval=0.1)
    got = [r for r in rtts if r is not None]
    assert len(got) == 20
    mean = statistics.median(got)  # robust to a VM's scheduling hiccups
    assert abs(mean - 40.0) <= 0.1 * 40.0 + 1.0, f"median RTT {mean:.2f} ms"


def test_tcp_reaches_the_rate(net: Network, measure) -> None:
    res = measure.iperf3(net.runner, net.host("h1"), net.host("h2"), "10.0.0.2",
                         seconds=8, omit=2)
    bps = res["end"]["sum_received"]["bits_per_second"]
    assert abs(bps - 10e6) <= 0.10 * 10e6, f"TCP {bps / 1e6:.2f} Mbit/s"


# iperf3 sets up a UDP stream with one datagram each way and no retransmission, so on a
# lossy link it aborts with this error (esnet/iperf#862, #351): about 1 test in 10 at 5 %
UDP_SETUP_LOST = "unable to read from stream socket"


def test_loss_matches_binomial_and_resets_to_zero(net: Network, measure) -> None:
    net.set_shape("link", SHAPE.changed(loss_pct=5.0))
    for attempt in range(3):  # only a lost set-up datagram is tried again
        sent0, dropped0 = _netem_counts(net)
        try:
            res = measure.iperf3(net.runner, net.host("h1"), net.host("h2"), "10.0.0.2",
                                 seconds=6, udp_rate="2M")
            break
        except AssertionError as exc:
            if UDP_SETUP_LOST not in str(exc) or attempt == 2:
                raise
            print(f"iperf3 attempt {attempt + 1}: UDP set-up datagram lost, trying again")
    sent1, dropped1 = _netem_counts(net)
    n, lost = res["end"]["sum"]["packets"], res["end"]["sum"]["lost_packets"]
    # what netem itself did on h1-eth0 in the meantime (also iperf3's control traffic)
    k_in, k_drop = sent1 - sent0 + dropped1 - dropped0, dropped1 - dropped0
    lo, hi = measure.binomial_interval(n, 0.05)
    why = (f"iperf3: {lost} of {n} lost, 99 % interval [{lo}, {hi}]; "
           f"netem dropped {k_drop} of {k_in}")
    assert n > 1000
    assert lo <= lost <= hi, why
    net.set_shape("link", SHAPE.changed(loss_pct=0.0))
    res = measure.iperf3(net.runner, net.host("h1"), net.host("h2"), "10.0.0.2",
                         seconds=3, udp_rate="2M")
    assert res["end"]["sum"]["lost_packets"] == 0


def _netem_counts(net: Network) -> tuple[int, int]:
    """(packets sent, packets dropped) by the netem qdisc on h1-eth0."""
    out = net.runner.run(["tc", "-s", "qdisc", "show", "dev", "h1-eth0"],
                         host=net.host("h1")).stdout
    m = re.search(r"qdisc netem 1: root.*?Sent \d+ bytes (\d+) pkt \(dropped (\d+)", out, re.S)
    assert m, out
    return int(m.group(1)), int(m.group(2))


def _sent_packets(net: Network) -> int:
    out = net.runner.run(["tc", "-s", "qdisc", "show", "dev", "h1-eth0"],
                         host=net.host("h1")).stdout
    m = re.search(r"qdisc netem 1: root.*?Sent \d+ bytes (\d+) pkt", out, re.S)
    assert m, out
    return int(m.group(1))


def test_change_keeps_the_qdiscs(net: Network, measure) -> None:
    measure.ping(net.runner, net.host("h1"), "10.0.0.2", count=3, interval=0.05)
    before = _sent_packets(net)
    net.set_shape("link", SHAPE.changed(bw_bps=2_000_000, delay_s=0.005, jitter_s=0.001))
    after = _sent_packets(net)
    assert before >= 3 and after >= before  # a re-created qdisc would count from zero
    out = net.runner.run(["tc", "qdisc", "show", "dev", "h1-eth0"], host=net.host("h1")).stdout
    assert "rate 2Mbit" in out and "delay 5ms" in out and "pfifo 3:" in out
    assert re.search(r"pfifo 3: parent 2:1 limit 100p", out), out
