"""Schedule parsing, trace replay, P3 presets and the player (with a fake clock)."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import pytest

from testbed.core.errors import InputError
from testbed.net import schedule as sc
from testbed.net.shaping import LinkShape
from testbed.plan.schedule import LinkChange, ScheduleEvent


def test_event_from_spec_mapping() -> None:
    ev = sc.event_from_mapping({"at": "3s", "link": "wifi", "bw": "2Mbit", "loss": "0%"})
    assert ev == ScheduleEvent(3.0, "wifi", LinkChange(bw_bps=2_000_000, loss_pct=0.0))
    down = sc.event_from_mapping({"at": "12s", "link": "wifi", "down": True})
    assert down.change.up is False
    assert down.change.as_record() == {"up": False}


@pytest.mark.parametrize("data, words", [
    ({"link": "wifi", "bw": "1Mbit"}, "needs 'at'"),
    ({"at": "1s", "link": "wifi"}, "nothing to change"),
    ({"at": "1s", "link": "wifi", "bw": "1Mbps"}, "schedule[0].bw"),
    ({"at": "x", "link": "wifi", "bw": "1Mbit"}, "schedule[0].at"),
    ({"at": "1s", "link": "wifi", "colour": 1}, "unknown key"),
    ({"at": "1s", "link": "wifi", "down": "yes"}, "true or false"),
    ({"at": "1s", "link": "wifi", "down": True, "up": True}, "not both"),
])
def test_bad_entries_name_key_and_remedy(data: dict, words: str) -> None:
    with pytest.raises(InputError) as err:
        sc.parse_schedule([data])
    assert words in str(err.value)


def test_parse_schedule_sorts_by_time() -> None:
    evs = sc.parse_schedule([{"at": "5s", "link": "a", "up": True},
                             {"at": "1s", "link": "a", "down": True}])
    assert [e.at_s for e in evs] == [1.0, 5.0]


def test_change_applies_to_shape() -> None:
    shape = LinkShape(bw_bps=10_000_000, delay_s=0.01, loss_pct=5)
    new = LinkChange(bw_bps=2_000_000, loss_pct=0.0).apply_to(shape)
    assert (new.bw_bps, new.delay_s, new.loss_pct) == (2_000_000, 0.01, 0.0)
    assert LinkChange(up=False).apply_to(shape) is shape


def test_trace_with_units_and_empty_cells() -> None:
    text = "time,bw,delay,loss\n0s,10Mbit,10ms,0%\n1.5s,2Mbit,,\n3s,,70ms,1%\n"
    evs = sc.parse_trace(io.StringIO(text), "wifi")
    assert [e.at_s for e in evs] == [0.0, 1.5, 3.0]
    assert evs[1].change == LinkChange(bw_bps=2_000_000)
    assert evs[2].change == LinkChange(delay_s=0.07, loss_pct=1.0)


def test_trace_with_bare_numbers(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("time_s,bw_kbit,delay_ms,loss_pct\n0,384,70,0.5\n2.5,20000,1,0\n")
    evs = sc.load_trace(p, "cell")
    assert evs[0].change == LinkChange(bw_bps=384_000, delay_s=0.07, loss_pct=0.5)
    assert evs[1].at_s == 2.5 and evs[1].change.bw_bps == 20_000_000


@pytest.mark.parametrize("text, words", [
    ("", "empty trace"),
    ("when,bw\n", "unknown column"),
    ("bw\n10Mbit\n", "needs a 'time'"),
    ("time,bw\n2s,1Mbit\n1s,2Mbit\n", "goes backwards"),
    ("time,bw\n1s,fast\n", ":2: column 'bw'"),
    ("time,bw\n1s\n", "1 cells"),
])
def test_bad_traces(text: str, words: str) -> None:
    with pytest.raises(InputError, match=None) as err:
        sc.parse_trace(io.StringIO(text), "x", source="t.csv")
    assert words in str(err.value) and "t.csv" in str(err.value)


def test_missing_trace_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        sc.load_trace(tmp_path / "nope.csv", "x")


def test_p3_wlan_to_imt2000_with_outage() -> None:
    p = sc.p3_preset("wlan-to-imt2000", "access", outage_s=3.5)
    assert p.initial.bw_bps == 20_000_000 and p.initial.delay_s == 0.001
    assert [(e.at_s, e.change.up) for e in p.events] == [(10.0, False), (13.5, True)]
    assert p.events[1].change.bw_bps == 384_000 and p.events[1].change.delay_s == 0.07


def test_p3_imt2000_to_wired_and_alternating() -> None:
    wired = sc.p3_preset("imt2000-to-wired", "access", outage_s=0.5)
    assert wired.initial == sc.IMT2000
    assert wired.events[-1].change.bw_bps == 100_000_000
    alt = sc.p3_preset("alternating", "access", outage_s=0.5)
    downs = [e.at_s for e in alt.events if e.change.up is False]
    ups = [(e.at_s, e.change.bw_bps) for e in alt.events if e.change.up]
    assert downs == [10.0, 13.0, 16.0, 19.0]
    assert ups == [(10.5, 384_000), (13.5, 20_000_000), (16.5, 384_000), (19.5, 20_000_000)]
    no_outage = sc.p3_preset("alternating", "access", outage_s=0)
    assert len(no_outage.events) == 4 and all(e.change.up is None for e in no_outage.events)


def test_unknown_preset() -> None:
    with pytest.raises(InputError, match="alternating"):
        sc.p3_preset("wlan-to-wlan", "x")


class FakeClock:
    """A clock that jumps forward whenever the player waits."""

    def __init__(self, t: float):
        self.t = t
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            self.t += 0.0004
            return self.t


def test_player_applies_in_order_and_logs(tmp_path: Path) -> None:
    seen: list[str] = []

    def apply(ev: ScheduleEvent) -> None:
        if ev.link == "bad":
            raise RuntimeError("tc said no")
        seen.append(ev.link)

    t0 = time.time()
    events = [ScheduleEvent(0.02, "b", LinkChange(up=True)),
              ScheduleEvent(0.01, "a", LinkChange(bw_bps=1000)),
              ScheduleEvent(0.03, "bad", LinkChange(loss_pct=1.0))]
    log = tmp_path / "samples" / "events.jsonl"
    player = sc.SchedulePlayer(apply, events, t0, log=log).start()
    player.join(5)
    assert player.done()
    assert seen == ["a", "b"]
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["link"] for x in lines] == ["a", "b", "bad"]
    assert lines[0]["changes"] == {"bw_bps": 1000}
    assert lines[2]["error"] == "tc said no"
    for x in lines:
        assert x["t_applied"] >= x["t_planned"]
        assert x["t_applied"] - x["t_planned"] < 0.5
    assert lines[1]["t_planned"] == pytest.approx(t0 + 0.02)


def test_player_stop_skips_the_rest() -> None:
    seen: list[float] = []
    player = sc.SchedulePlayer(lambda ev: seen.append(ev.at_s),
                               [ScheduleEvent(60.0, "x", LinkChange(up=True))],
                               time.time())
    player.start()
    player.stop(2)
    assert player.done() and seen == []


def test_player_uses_the_given_clock() -> None:
    clock = FakeClock(1000.0)
    player = sc.SchedulePlayer(lambda ev: None,
                               [ScheduleEvent(0.01, "x", LinkChange(up=True))],
                               1000.0, clock=clock).start()
    player.join(5)
    assert player.applied[0].t_planned == 1000.01
    assert player.applied[0].t_applied >= 1000.01


def test_realtime_priority_applies_to_the_calling_thread_only() -> None:
    import os
    import threading

    from testbed.core.commands import realtime_priority

    before = os.sched_getscheduler(0)
    seen: dict[str, object] = {}

    def body() -> None:
        seen["took"] = realtime_priority(0)
        seen["policy"] = os.sched_getscheduler(0)

    th = threading.Thread(target=body)
    th.start()
    th.join()
    if not seen["took"]:
        pytest.skip("not allowed to set a real-time priority here (needs root)")
    assert seen["policy"] == os.SCHED_FIFO
    assert os.sched_getscheduler(0) == before  # this thread is untouched
