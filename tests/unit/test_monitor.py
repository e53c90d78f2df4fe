"""testbed.net.monitor: pure parsers and the sampling thread over fake files."""

from __future__ import annotations

from testbed.net.monitor import (
    LinkCounter,
    Monitor,
    busiest_fractions,
    busy_fractions,
    parse_dpctl_lost,
    parse_proc_stat,
    parse_proc_stat_cpus,
    parse_qdisc_drops,
    parse_softnet,
    peak_rate_bps,
    with_queue_drops,
)


def test_proc_stat_and_softnet():
    text = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0\n"
    assert parse_proc_stat(text) == (150, 1000)
    soft = "0000000a 00000002 00000001 0 0\n00000005 00000000 00000003 0 0\n"
    assert parse_softnet(soft) == {"processed": 15, "dropped": 2, "time_squeeze": 4}


def test_busiest_cpu_is_what_saturates():
    text = "cpu  10 0 0 10 0\ncpu0 10 0 0 0 0 0 0 0\ncpu1 0 0 0 10 0 0 0 0\n"
    assert parse_proc_stat_cpus(text) == [(10, 10), (0, 10)]
    later = [(20, 20), (0, 20)]  # cpu0 fully busy, cpu1 idle: the machine is 50 % busy
    assert busiest_fractions([parse_proc_stat_cpus(text), later]) == [1.0]


def test_a_counter_going_backwards_gives_no_share_for_that_interval():
    """An idle NOHZ CPU's idle count can step back between two reads: that interval of
    that CPU is left out instead of reading as more than 100 % (or below 0 %) busy."""
    # cpu0's idle went back by 5 jiffies while busy rose by 10: (10) / (10 - 5) = 2.0
    first, second = [(100, 200), (50, 200)], [(110, 205), (60, 220)]
    assert busiest_fractions([first, second]) == [0.5]  # cpu1 only: 10 busy of 20
    assert busiest_fractions([first, [(110, 205), (40, 230)]]) == []  # busy went back too
    assert busy_fractions([(0.0, 100, 200), (0.5, 110, 205), (1.0, 120, 225)]) == [0.5]
    for samples in ([(0.0, 0, 10), (0.5, 5, 20)], [(0.0, 0, 10), (0.5, 10, 10)]):
        assert all(0 <= s <= 1 for s in busy_fractions(samples))


def test_dpctl_and_qdisc_counters():
    assert parse_dpctl_lost("system@ovs-system:\n  lookups: hit:10 missed:4 lost:2\n") == 2
    assert parse_dpctl_lost("nothing") is None
    js = ('[{"kind":"tbf","dev":"s1-eth1","drops":3},{"kind":"pfifo","dev":"s1-eth1",'
          '"drops":4},{"kind":"netem","dev":"s1-eth1","drops":50},'
          '{"kind":"noqueue","dev":"lo"}]')
    # netem's drops are configured random loss, not a full queue
    assert parse_qdisc_drops(js) == {"s1-eth1": 7, "lo": 0}
    links = [{"egress": "s1-eth1"}, {"egress": "S0-eth0"}]
    assert with_queue_drops(links, {"s1-eth1": 5}, {"s1-eth1": 7}) == [
        {"egress": "s1-eth1", "queue_drops": 2}, {"egress": "S0-eth0", "queue_drops": None}]


def test_peak_rate_over_one_second_windows():
    samples = [(0.0, 0), (0.5, 500_000), (1.0, 1_250_000), (1.5, 1_300_000), (2.0, 1_350_000)]
    assert peak_rate_bps(samples) == 1_250_000 * 8
    assert peak_rate_bps(samples[:2]) is None


def test_monitor_samples_fake_files():
    counter = {"n": 0}

    def read(path: str) -> str:
        counter["n"] += 1
        n = counter["n"]
        if path == "/proc/stat":
            return (f"cpu  {n * 100} 0 0 {n * 100} 0 0 0 0\n"
                    f"cpu0 {n * 100} 0 0 {n * 100} 0 0 0 0\n")
        if path.endswith("softnet_stat"):
            return "00000001 00000000 00000000\n"
        return str(n * 1000)

    link = LinkCounter("wifi", "s1-eth1", "s1-eth1", "tx_bytes", 10_000_000)
    m = Monitor([link], interval=0.01, read=read)
    m.start()
    import time
    time.sleep(0.1)
    s = m.stop()
    assert s["samples"] >= 3 and s["cpu_busy_mean"] == 0.5 and s["cpu_saturated_share"] == 0
    assert s["softnet_dropped"] == 0 and s["errors"] == []
    assert s["links"][0]["link"] == "wifi" and s["links"][0]["bytes"] > 0


def test_a_schedule_splits_a_link_into_phases_each_with_its_rate():
    from testbed.net.monitor import link_phases, phase_peak_bps
    from testbed.spec.linkshape import LinkShape
    from testbed.spec.model import ScheduleEvent

    start = LinkShape(bw_bps=10_000_000, delay_s=0.01, queue_pkts=100)
    events = [ScheduleEvent(at=2.0, link="wifi", bw="384kbit"),
              ScheduleEvent(at=4.0, link="wifi", down=True),
              ScheduleEvent(at=5.0, link="wifi", down=False),
              ScheduleEvent(at=6.0, link="wifi", bw="384kbit")]  # the rate it has: no phase
    ph = link_phases(start, events, t0=100.0, t_end=108.0)
    assert [(p.start, p.end, p.bw_bps, p.up) for p in ph] == [
        (100.0, 102.0, 10_000_000, True), (102.0, 104.0, 384_000, True),
        (104.0, 105.0, 0, False), (105.0, 108.0, 384_000, True)]
    # the token bucket: 10 ms at the rate, at least one 1514-byte frame
    assert [p.burst_bytes for p in ph] == [12_500, 1_514, 1_514, 1_514]
    assert link_phases(start, [], 100.0, 108.0) == [ph[0].__class__(100.0, 108.0, 10_000_000,
                                                                     12_500, True)]

    # a counter sampled every 0.5 s carrying each phase's rate, and 10 Mbit/s for the half
    # second after the change to 384 kbit/s (what the faster rate had queued drains)
    def rate(t: float) -> float:
        return 10e6 if t < 102.5 else 384e3 if t < 104 else 0.0 if t < 105 else 384e3
    samples, total = [], 0.0
    for i in range(17):
        t = 100.0 + i / 2
        samples.append((t, int(total)))
        total += rate(t) / 8 / 2
    peaks = [phase_peak_bps(samples, p) for p in ph]
    # inside each phase, 0.25 s from its ends: 100.5-101.5 s, 102.5-103.5 s, none whole
    # second in 104.25-104.75 s, 105.5-107.5 s
    assert peaks[0] == 10e6 and peaks[2] is None
    assert peaks[1] == 384e3 and peaks[3] == 384e3
    assert peak_rate_bps(samples) == 10e6

    link = LinkCounter("wifi", "s1-eth1", "s1-eth1", "tx_bytes", 10_000_000, start)
    m = Monitor([link], read=lambda p: "")
    m.counters["s1-eth1"] = samples
    m.t_end = 108.0
    entry = m.summary(events, t0=100.0)["links"][0]
    assert entry["burst_bytes"] == 12_500 and entry["peak_bps"] == 10e6
    assert [(p["from_s"], p["to_s"], p["bw_bps"], p["up"], p["peak_bps"])
            for p in entry["phases"]] == [(0.0, 2.0, 10_000_000, True, 10e6),
                                          (2.0, 4.0, 384_000, True, 384e3),
                                          (4.0, 5.0, 0, False, None),
                                          (5.0, 8.0, 384_000, True, 384e3)]
    # another link's events, or none: no phases
    assert "phases" not in m.summary([ScheduleEvent(at=2.0, link="cell", bw="1Mbit")],
                                     t0=100.0)["links"][0]
    assert "phases" not in m.summary()["links"][0]
