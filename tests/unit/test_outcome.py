"""testbed.run.outcome: the problems that make a finished run `failed`."""

from __future__ import annotations

from testbed.run.outcome import run_problems, schedule_problems


def meta(**kw):
    base = {"t0": 100.0, "t_traffic_end": 110.0,
            "flows": {"count": 3, "failed": 0, "errors": []},
            "captures": {"S1-eth0.pcap": {"captured": 10, "received": 10, "dropped": 0}},
            "samplers": [{"host": "S1", "samples": 20, "errors": 0}]}
    base.update(kw)
    return base


def test_a_run_that_did_its_job_has_no_problem():
    assert run_problems(meta(), [], []) == []


def test_a_flow_that_did_not_finish_is_named():
    [p] = run_problems(meta(flows={"count": 3, "failed": 1, "errors": ["interrupted"]}), [], [])
    assert p == "1 of 3 flows did not finish (interrupted)"


def test_schedule_events_due_but_not_applied_or_failed():
    applied = [{"t_planned": 102.0, "link": "wifi", "error": None}]
    [p] = schedule_problems([2.0, 5.0, 20.0], applied, 100.0, 110.0)
    assert p == "1 of 2 schedule event(s) due before the run ended were not applied " \
                "(first missing at 5s)"  # the one at 20 s was after the run's end
    failed = [{"t_planned": 102.0, "link": "wifi", "error": "RTNETLINK: No such device"}]
    [p] = schedule_problems([2.0], failed, 100.0, 110.0)
    assert "1 schedule event(s) failed" in p and "link wifi at 2.000s" in p


def test_dead_capture_and_idle_sampler():
    m = meta(captures={"a.pcap": {"captured": None, "received": None, "dropped": None},
                       "b.pcap": {"captured": 5}},
             samplers=[{"host": "client", "samples": 0, "errors": 3}])
    assert run_problems(m, [], []) == [
        "capture a.pcap did not end cleanly (tcpdump printed no closing counts)",
        "the cwnd sampler on client took no sample (3 errors)"]
