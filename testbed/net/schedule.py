"""Time-varying links on the network: a player that applies events on time, and the P3
handover presets.

* An event (`testbed.spec.model.ScheduleEvent`, from a spec's ``[[schedule]]``, a trace
  file read by `testbed.spec.trace` or a preset here) changes any of bw / delay / loss /
  jitter of a named link, or takes it down / up.  `testbed.net.network.Network.apply`
  turns it into ``tc qdisc change`` and ``ip link set`` commands (never re-creating a
  qdisc).
* `SchedulePlayer` runs in a thread, sleeps on the ``time.time()`` clock (the clock
  tcpdump stamps packets with) until ``t0 + at``, applies the event and appends one
  JSON line to ``samples/events.jsonl``::

      {"t_planned": 1700000003.0, "t_applied": 1700000003.004, "link": "wifi",
       "changes": {"bw_bps": 2000000}, "error": null}

  ``changes`` uses base units: ``bw_bps``, ``delay_s``, ``jitter_s``, ``loss_pct``, and
  ``up`` (false: link taken down, true: brought back).  ``t_applied`` is taken when the
  commands have returned, i.e. when the kernel has the new configuration.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from testbed.core.errors import SpecError
from testbed.core.process import realtime_priority
from testbed.spec.linkshape import LinkShape
from testbed.spec.model import ScheduleEvent

# -- P3 presets (vertical handover) --------------------------------------------------

WLAN = LinkShape(bw_bps=20_000_000, delay_s=0.001, queue_pkts=100)
IMT2000 = LinkShape(bw_bps=384_000, delay_s=0.070, queue_pkts=100)
WIRED = LinkShape(bw_bps=100_000_000, delay_s=0.005, queue_pkts=100)
ACCESS = {"wlan": WLAN, "imt2000": IMT2000, "wired": WIRED}


def handover(link: str, at_s: float, to: LinkShape, outage_s: float = 0.0
             ) -> list[ScheduleEvent]:
    """A vertical handover: at ``at_s`` the link goes down for ``outage_s`` (if > 0),
    then comes back with ``to``'s rate and delay."""
    if outage_s < 0:
        raise SpecError(f"handover outage {outage_s:g}s is negative")
    if outage_s == 0:
        return [ScheduleEvent(at=at_s, link=link, bw=to.bw_bps, delay=to.delay_s)]
    return [ScheduleEvent(at=at_s, link=link, down=True),
            ScheduleEvent(at=at_s + outage_s, link=link, down=False, bw=to.bw_bps,
                          delay=to.delay_s)]


@dataclass(frozen=True)
class Preset:
    """A link's starting shape plus its events."""

    initial: LinkShape
    events: list[ScheduleEvent]


def p3_preset(name: str, link: str, outage_s: float = 0.5) -> Preset:
    """The handover scenarios of study P3.

    name: ``wlan-to-imt2000`` (at 10 s), ``imt2000-to-wlan``, ``imt2000-to-wired``, or
    ``alternating`` (WLAN -> IMT-2000 -> WLAN -> IMT-2000 -> WLAN at 10, 13, 16, 19 s);
    link: the link to drive; outage_s: the outage at each switch (0.5 s or 3.5 s).
    """
    if name == "alternating":
        seq = [IMT2000, WLAN, IMT2000, WLAN]
        events = [e for t, to in zip((10.0, 13.0, 16.0, 19.0), seq, strict=True)
                  for e in handover(link, t, to, outage_s)]
        return Preset(WLAN, events)
    parts = name.split("-to-")
    if len(parts) != 2 or parts[0] not in ACCESS or parts[1] not in ACCESS \
            or parts[0] == parts[1]:
        raise SpecError(f"unknown P3 preset {name!r}; use wlan-to-imt2000, imt2000-to-wlan, "
                        "imt2000-to-wired, wired-to-imt2000 or alternating")
    return Preset(ACCESS[parts[0]], handover(link, 10.0, ACCESS[parts[1]], outage_s))


# -- applying on time ------------------------------------------------------------------

Applier = Callable[[ScheduleEvent], object]  # False: the event changed nothing


@dataclass
class AppliedEvent:
    """One line of ``events.jsonl``."""

    t_planned: float
    t_applied: float
    link: str
    changes: dict[str, int | float | bool]
    error: str | None
    after_error: str | None = None

    def to_json(self) -> str:
        rec = {"t_planned": self.t_planned, "t_applied": self.t_applied,
               "link": self.link, "changes": self.changes, "error": self.error}
        if self.after_error is not None:
            rec["after_error"] = self.after_error
        return json.dumps(rec)


class SchedulePlayer:
    """Applies events at ``t0 + at`` from a background thread.

    apply: called with each event (e.g. `Network.apply`); events: what to play;
    t0: the run's time origin on the ``time.time()`` clock; log: ``events.jsonl`` path
    (appended to, one line per event, flushed at once); after: called with each event
    once it is applied and logged (e.g. the hand-over notifier), its failure recorded in
    the event's log line as ``after_error``; not when apply returned False (the event
    changed nothing).  A failing event is logged with its error
    and the player goes on.
    """

    def __init__(self, apply: Applier, events: Iterable[ScheduleEvent], t0: float,
                 log: Path | None = None, clock: Callable[[], float] = time.time,
                 after: Applier | None = None):
        self._apply = apply
        self._after = after
        self.events = sorted(events, key=lambda e: e.at)
        self.t0 = t0
        self.log = log
        self.applied: list[AppliedEvent] = []
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> SchedulePlayer:
        """Start the thread (returns self)."""
        self._thread = threading.Thread(target=self._run, name="schedule", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop before the next event and wait for the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def join(self, timeout: float | None = None) -> None:
        """Wait until every event has been applied (or the player was stopped)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def _wait_until(self, target: float) -> bool:
        while not self._stop.is_set():
            left = target - self._clock()
            if left <= 0:
                return True
            # sleep most of the way, then in short steps to land close to the target
            self._stop.wait(left - 0.002 if left > 0.004 else min(left, 0.0005))
        return False

    def _run(self) -> None:
        realtime_priority(0)  # this thread
        for ev in self.events:
            planned = self.t0 + ev.at
            if not self._wait_until(planned):
                return
            error, changed = None, None
            try:
                changed = self._apply(ev)
            except Exception as exc:  # recorded; the schedule goes on
                error = str(exc) or type(exc).__name__
            rec = AppliedEvent(planned, self._clock(), ev.link, ev.as_record(), error)
            # an event that changed nothing (a trace row repeating the link's rate) is no
            # hand-off: the notifier would restart every sender for nothing
            if self._after is not None and error is None and changed is not False:
                try:
                    self._after(ev)
                except Exception as exc:  # recorded; the schedule goes on
                    rec.after_error = str(exc) or type(exc).__name__
            self.applied.append(rec)
            if self.log is not None:
                self.log.parent.mkdir(parents=True, exist_ok=True)
                with open(self.log, "a") as f:
                    f.write(rec.to_json() + "\n")
