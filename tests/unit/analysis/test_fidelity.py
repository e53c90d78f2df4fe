"""analysis.fidelity: the per-run verdict from what a run recorded."""

from __future__ import annotations

import pandas as pd

from analysis.fidelity import THRESHOLDS, assess, rtt_tolerance_ms
from testbed.results.summary import fidelity_columns


def raw(**kw):
    base = {"cpu_busy_mean": 0.3, "cpu_saturated_share": 0.0, "softnet_dropped": 0,
            "ovs_upcalls_lost": 0, "rps_mask": "3", "cpus": 2, "links": [], "pings": []}
    base.update(kw)
    return base


def meta(**kw):
    m = {"fidelity_raw": raw(), "controller": {"kind": "single-path", "restarts": []},
         "readiness": {"quiet": True, "waited_s": 0.5, "unreachable": []},
         "captures": {"a.pcap": {"captured": 10, "dropped": 0}}}
    m.update(kw)
    return m


def flows(ratio, packets=1000, protocol="tcp"):
    return pd.DataFrame({"flow_id": ["f1"], "protocol": [protocol],
                         "data_packets": [packets], "ooo_packets": [ratio * packets],
                         "ooo_ratio": [ratio]})


def test_a_clean_run_is_ok():
    fid = assess(meta(), flows(0.0))
    assert fid["verdict"] == "ok" and fid["reasons"] == []
    assert fid["checks"]["emulator_ooo_ratio_max"] == 0.0


def test_reordering_under_single_path_is_the_emulators():
    fid = assess(meta(), flows(0.13))
    assert fid["verdict"] == "fail"
    assert "13.00% of its segments arrived after a segment sent later" in fid["reasons"][0]
    # just above the warn limit
    assert assess(meta(), flows(0.002))["verdict"] == "warn"
    # spraying reorders on purpose: not judged
    spray = meta(controller={"kind": "spray", "restarts": []})
    assert assess(spray, flows(0.3))["verdict"] == "ok"
    # a short flow says nothing
    assert assess(meta(), flows(0.5, packets=20))["verdict"] == "ok"


def test_saturated_link_below_its_rate_and_cpu_saturation():
    links = [{"link": "wifi", "egress": "s1-eth1", "bw_bps": 10e6, "peak_bps": 6.5e6,
              "queue_drops": 12},
             {"link": "cell", "egress": "s2-eth1", "bw_bps": 10e6, "peak_bps": 1e6,
              "queue_drops": 0}]  # not saturated: not judged
    fid = assess(meta(fidelity_raw=raw(links=links, cpu_saturated_share=0.8,
                                       cpu_busy_mean=0.97)))
    assert fid["verdict"] == "fail"
    text = " | ".join(fid["reasons"])
    assert "link wifi (s1-eth1) carried at most 6.50 of 10.00 Mbit/s (65%)" in text
    assert "a CPU was at least 95 % busy for 80% of the traffic phase" in text
    assert "cell" not in text
    assert fid["checks"]["rate_ratio_min"] == 0.65


def test_ping_rtt_and_first_rtt_against_the_configured_path():
    pings = [{"name": "rtt", "src": "client", "dst": "server", "path": "wifi",
              "base_rtt_ms": 30.0}]
    table = pd.DataFrame({"t": [1.0, 2.0, 3.0], "src": ["client"] * 3, "dst": ["server"] * 3,
                          "path": ["wifi"] * 3, "rtt_ms": [88.9, 30.5, 30.4],
                          "lost": [False] * 3})
    fid = assess(meta(fidelity_raw=raw(pings=pings)), ping=table)
    assert fid["verdict"] == "fail"  # 58.9 ms late > 5 tolerances of 3.5 ms
    assert fid["reasons"] == ["fail: ping rtt: first RTT 88.90 ms against 30.00 ms "
                              "configured (tolerance 3.50 ms)"]
    assert fid["checks"]["first_rtt_ms"] == 88.9
    assert rtt_tolerance_ms(30.0) == 3.5


def test_late_events_drops_restarts_and_rps_off():
    events = pd.DataFrame({"t_planned": [10.0], "t_applied": [10.08]})
    m = meta(fidelity_raw=raw(softnet_dropped=3, rps_mask=None),
             controller={"kind": "ecmp", "restarts": [{"t": 1}]})
    fid = assess(m, events=events)
    assert fid["verdict"] == "warn"
    text = " | ".join(fid["reasons"])
    for part in ("applied 80 ms after", "dropped 3 packets", "restarted 1 time",
                 "receive packet steering was off"):
        assert part in text


def test_runs_without_fidelity_data_are_unknown_and_columns():
    assert assess({})["verdict"] == "unknown"
    cols = fidelity_columns(assess(meta(), flows(0.0)))
    assert cols["fidelity"] == "ok" and cols["fidelity_reasons"] is None
    assert cols["fidelity_emulator_ooo_ratio_max"] == 0.0
    assert set(THRESHOLDS) >= {"rate_ratio", "emulator_ooo_ratio"}


def test_docs_thresholds_table_is_the_code():
    from pathlib import Path

    from analysis.fidelity import thresholds_markdown

    doc = (Path(__file__).resolve().parents[3] / "docs" / "fidelity.md").read_text()
    assert thresholds_markdown() in doc


def test_one_busy_cpu_is_enough_to_warn():
    # the 1 Gbit/s link in the TCG VM: 77 Mbit/s, no queue overflow, busiest CPU 87 %
    fid = assess(meta(fidelity_raw=raw(cpu_busiest_mean=0.88, cpu_saturated_share=0.17,
                                       cpu_busy_mean=0.80)))
    assert fid["verdict"] == "warn"
    assert "the busiest CPU was 88% busy on average" in fid["reasons"][0]
    assert assess(meta(fidelity_raw=raw(cpu_busiest_mean=0.4)))["verdict"] == "ok"


def test_softnet_drops_of_a_downed_link_are_not_the_emulators():
    down = pd.DataFrame({"t_planned": [10.0], "t_applied": [10.01],
                         "changes": ['{"up": false}']})
    m = meta(fidelity_raw=raw(softnet_dropped=2))
    fid = assess(m, events=down)
    assert fid["verdict"] == "ok", fid["reasons"]
    assert fid["checks"]["softnet_dropped_note"].startswith("not judged")
    up = down.assign(changes=['{"bw_bps": 1000000}'])
    assert assess(m, events=up)["verdict"] == "warn"


def test_what_the_monitor_could_not_read_is_named():
    fid = assess(meta(fidelity_raw=raw(errors=["/proc/stat: gone"])))
    assert fid["verdict"] == "warn"
    assert fid["reasons"] == ["warn: the fidelity monitor could not measure everything: "
                              "/proc/stat: gone"]


def test_each_phase_of_a_scheduled_link_is_judged_against_the_rate_then_in_force():
    def phase(f, t, bw, peak, up=True, burst=1_514):
        return {"from_s": f, "to_s": t, "bw_bps": bw, "up": up, "burst_bytes": burst,
                "peak_bps": peak}
    events = pd.DataFrame({"t_planned": [3.0, 5.0], "t_applied": [3.001, 5.001],
                           "link": ["access", "access"],
                           "changes": ['{"bw_bps": 10000000}', '{"up": false}']})
    good = {"link": "access", "egress": "s1-eth2", "bw_bps": 384e3, "burst_bytes": 1_514,
            "peak_bps": 10.06e6, "queue_drops": 92,
            "phases": [phase(0, 3, 384e3, 0.39e6), phase(3, 5, 10e6, 9.9e6, burst=12_500),
                       phase(5, 8, 0, 0.0, up=False)]}
    fid = assess(meta(fidelity_raw=raw(links=[good])), events=events)
    assert fid["verdict"] == "ok", fid["reasons"]
    # the best phase against its own rate (0.39 / 0.384; 9.9 / 10), not 10.06 / 0.384 = 26
    assert fid["checks"]["rate_ratio_min"] == round(0.39e6 / 384e3, 4)
    # 0.39 Mbit/s of the 0.384 + 1514 B x 8 / 1 s = 0.396 allowed
    assert fid["checks"]["rate_over_max"] == round(0.39e6 / (384e3 + 1_514 * 8), 4)

    # the 384 kbit/s phase carried 1 Mbit/s: the shaping failed there, whatever the load
    leaky = {**good, "phases": [phase(0, 3, 384e3, 1e6), *good["phases"][1:]]}
    fid = assess(meta(fidelity_raw=raw(links=[leaky])), events=events)
    assert fid["verdict"] == "fail"
    assert ("link access (s1-eth2) carried 1 Mbit/s at most while shaped to 0.384 Mbit/s "
            "from 0.0 to 3.0 s (at most 0.396 with its token bucket)") in fid["reasons"][0]
    # a downed link that carried traffic (beyond one frame a second)
    alive = {**good, "phases": [*good["phases"][:2], phase(5, 8, 0, 20e3, up=False)]}
    fid = assess(meta(fidelity_raw=raw(links=[alive])), events=events)
    assert fid["verdict"] == "fail" and "while down from 5.0 to 8.0 s" in fid["reasons"][0]
    # slightly above the rate: warn (1.2 x allowed)
    warm = {**good, "phases": [phase(0, 3, 384e3, 1.2 * (384e3 + 1_514 * 8)),
                               *good["phases"][1:]]}
    assert assess(meta(fidelity_raw=raw(links=[warm])), events=events)["verdict"] == "warn"

    # a scheduled link recorded before phases existed (format < 1.10): not judged at all
    old = {k: v for k, v in good.items() if k not in ("phases", "burst_bytes")}
    fid = assess(meta(fidelity_raw=raw(links=[old])), events=events)
    assert fid["verdict"] == "ok" and fid["checks"]["rate_over_max"] is None
    assert fid["checks"]["rate_ratio_min"] is None
    # ... but a link no event changed is, with one frame as its bucket
    fid = assess(meta(fidelity_raw=raw(links=[{**old, "link": "other"}])), events=events)
    assert fid["verdict"] == "fail" and "0.384 Mbit/s (at most 0.396" in fid["reasons"][0]
