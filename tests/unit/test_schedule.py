"""Schedule events on a link shape, P3 presets and the player (with a fake clock)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from testbed.core.errors import InputError
from testbed.net import schedule as sc
from testbed.net.shaping import LinkShape
from testbed.spec.model import ScheduleEvent


def test_event_applies_to_a_shape_and_records_base_units() -> None:
    shape = LinkShape(bw_bps=10_000_000, delay_s=0.01, loss_pct=5)
    ev = ScheduleEvent(at=3.0, link="wifi", bw=2_000_000, loss=0.0)
    new = ev.apply_to(shape)
    assert (new.bw_bps, new.delay_s, new.loss_pct) == (2_000_000, 0.01, 0.0)
    assert ev.as_record() == {"bw_bps": 2_000_000, "loss_pct": 0.0} and ev.link_up is None
    down = ScheduleEvent(at=12.0, link="wifi", down=True)
    assert down.link_up is False and down.as_record() == {"up": False}
    assert down.apply_to(shape) is shape
    back = ScheduleEvent(at=13.0, link="wifi", down=False, delay=0.07)
    assert back.as_record() == {"delay_s": 0.07, "up": True}


def test_events_built_in_code_are_range_checked() -> None:
    with pytest.raises(ValidationError, match="out of range"):
        ScheduleEvent(at=1.0, link="wifi", bw=20_000_000_000)
    with pytest.raises(ValidationError, match="negative"):
        ScheduleEvent(at=-1.0, link="wifi", down=True)


def test_p3_wlan_to_imt2000_with_outage() -> None:
    p = sc.p3_preset("wlan-to-imt2000", "access", outage_s=3.5)
    assert p.initial.bw_bps == 20_000_000 and p.initial.delay_s == 0.001
    assert [(e.at, e.link_up) for e in p.events] == [(10.0, False), (13.5, True)]
    assert p.events[1].bw == 384_000 and p.events[1].delay == 0.07


def test_p3_imt2000_to_wired_and_alternating() -> None:
    wired = sc.p3_preset("imt2000-to-wired", "access", outage_s=0.5)
    assert wired.initial == sc.IMT2000
    assert wired.events[-1].bw == 100_000_000
    alt = sc.p3_preset("alternating", "access", outage_s=0.5)
    downs = [e.at for e in alt.events if e.link_up is False]
    ups = [(e.at, e.bw) for e in alt.events if e.link_up]
    assert downs == [10.0, 13.0, 16.0, 19.0]
    assert ups == [(10.5, 384_000), (13.5, 20_000_000), (16.5, 384_000), (19.5, 20_000_000)]
    no_outage = sc.p3_preset("alternating", "access", outage_s=0)
    assert len(no_outage.events) == 4 and all(e.link_up is None for e in no_outage.events)


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
    events = [ScheduleEvent(at=0.02, link="b", down=False),
              ScheduleEvent(at=0.01, link="a", bw=1000),
              ScheduleEvent(at=0.03, link="bad", loss=1.0)]
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
    player = sc.SchedulePlayer(lambda ev: seen.append(ev.at),
                               [ScheduleEvent(at=60.0, link="x", down=False)],
                               time.time())
    player.start()
    player.stop(2)
    assert player.done() and seen == []


def test_player_uses_the_given_clock() -> None:
    clock = FakeClock(1000.0)
    player = sc.SchedulePlayer(lambda ev: None,
                               [ScheduleEvent(at=0.01, link="x", down=False)],
                               1000.0, clock=clock).start()
    player.join(5)
    assert player.applied[0].t_planned == 1000.01
    assert player.applied[0].t_applied >= 1000.01


def test_realtime_priority_applies_to_the_calling_thread_only() -> None:
    import os
    import threading

    from testbed.core.process import realtime_priority

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
