"""Time-varying links: events ``(at, link, changes)``, CSV trace replay, P3 presets,
and a player that applies them on time.

* An event (`testbed.plan.schedule.ScheduleEvent`) changes any of bw / delay / loss /
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
* Trace CSV: a header naming the columns, then one row per change.  Columns ``time``,
  ``bw``, ``delay``, ``loss`` (and optionally ``jitter``) take values with units
  (``1.5s``, ``10Mbit``, ``20ms``, ``1%``); ``time_s``, ``bw_mbit``, ``bw_kbit``,
  ``delay_ms``, ``jitter_ms``, ``loss_pct`` take bare numbers.  An empty cell keeps the
  previous value.
"""

from __future__ import annotations

import csv
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from testbed.core.commands import realtime_priority
from testbed.core.errors import InputError, SpecError
from testbed.core.units import parse_duration, parse_percent, parse_rate
from testbed.plan.schedule import LinkChange, ScheduleEvent
from testbed.spec.linkshape import LinkShape

CHANGE_KEYS = ("bw", "delay", "jitter", "loss", "down", "up")


def change_from_mapping(data: Mapping[str, Any], where: str = "schedule") -> LinkChange:
    """Parse spec-style changes ``{bw = "2Mbit", delay = "70ms", down = true, ...}``.

    data: the change keys (bw, delay, jitter, loss, down, up); where: the place in the
    spec, for error messages.
    """
    extra = sorted(set(data) - set(CHANGE_KEYS))
    if extra:
        raise SpecError(f"{where}: unknown key(s) {', '.join(extra)}; "
                        f"expected some of {', '.join(CHANGE_KEYS)}")
    kw: dict[str, Any] = {}
    parsers = (("bw", "bw_bps", parse_rate), ("delay", "delay_s", parse_duration),
               ("jitter", "jitter_s", parse_duration), ("loss", "loss_pct", parse_percent))
    for key, attr, parse in parsers:
        if key in data:
            try:
                kw[attr] = parse(data[key])
            except InputError as exc:
                raise SpecError(f"{where}.{key}: {exc}") from None
    for key, up_value in (("down", False), ("up", True)):
        if key in data:
            if not isinstance(data[key], bool):
                raise SpecError(f"{where}.{key}: expected true or false, got {data[key]!r}")
            if data[key]:
                if "up" in kw:
                    raise SpecError(f"{where}: give either down or up, not both")
                kw["up"] = up_value
    if not kw:
        raise SpecError(f"{where}: nothing to change; give at least one of "
                        f"{', '.join(CHANGE_KEYS)}")
    return LinkChange(**kw)


def event_from_mapping(data: Mapping[str, Any], where: str = "schedule") -> ScheduleEvent:
    """Parse one ``[[schedule]]`` entry: ``at``, ``link`` and the change keys."""
    if "at" not in data or "link" not in data:
        raise SpecError(f"{where}: needs 'at' (e.g. \"12s\") and 'link' (a path name)")
    try:
        at = parse_duration(data["at"])
    except InputError as exc:
        raise SpecError(f"{where}.at: {exc}") from None
    if not isinstance(data["link"], str):
        raise SpecError(f"{where}.link: expected a link name, got {data['link']!r}")
    rest = {k: v for k, v in data.items() if k not in ("at", "link")}
    return ScheduleEvent(at, data["link"], change_from_mapping(rest, where))


def parse_schedule(entries: Sequence[Mapping[str, Any]], where: str = "schedule"
                   ) -> list[ScheduleEvent]:
    """Parse a list of ``[[schedule]]`` entries, sorted by time (stable)."""
    events = [event_from_mapping(e, f"{where}[{i}]") for i, e in enumerate(entries)]
    return sorted(events, key=lambda e: e.at_s)


# -- trace replay -----------------------------------------------------------------------

_TRACE_COLUMNS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "time": ("at", parse_duration),
    "time_s": ("at", float),
    "bw": ("bw_bps", parse_rate),
    "bw_mbit": ("bw_bps", lambda v: round(float(v) * 1e6)),
    "bw_kbit": ("bw_bps", lambda v: round(float(v) * 1e3)),
    "delay": ("delay_s", parse_duration),
    "delay_ms": ("delay_s", lambda v: float(v) / 1e3),
    "jitter": ("jitter_s", parse_duration),
    "jitter_ms": ("jitter_s", lambda v: float(v) / 1e3),
    "loss": ("loss_pct", parse_percent),
    "loss_pct": ("loss_pct", float),
}


def parse_trace(stream: TextIO, link: str, source: str = "trace") -> list[ScheduleEvent]:
    """Parse a trace CSV (see the module docstring) into events for ``link``.

    stream: the CSV text; link: the link the trace drives; source: file name for errors.
    """
    reader = csv.reader(stream)
    try:
        header = [h.strip().lower() for h in next(reader)]
    except StopIteration:
        raise SpecError(f"{source}: empty trace; expected a header such as "
                        "'time,bw,delay,loss'") from None
    unknown = [h for h in header if h not in _TRACE_COLUMNS]
    if unknown:
        raise SpecError(f"{source}: unknown column(s) {', '.join(unknown)}; use "
                        f"{', '.join(_TRACE_COLUMNS)}")
    if not any(_TRACE_COLUMNS[h][0] == "at" for h in header):
        raise SpecError(f"{source}: needs a 'time' (or 'time_s') column")
    events: list[ScheduleEvent] = []
    last = -1.0
    for lineno, row in enumerate(reader, start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise SpecError(f"{source}:{lineno}: {len(row)} cells, header has {len(header)}")
        kw: dict[str, Any] = {}
        for name, cell in zip(header, row, strict=True):
            cell = cell.strip()
            if not cell:
                continue
            attr, parse = _TRACE_COLUMNS[name]
            try:
                kw[attr] = parse(cell)
            except (InputError, ValueError):
                raise SpecError(f"{source}:{lineno}: column {name!r} has {cell!r}") from None
        if "at" not in kw:
            raise SpecError(f"{source}:{lineno}: the time cell is empty")
        at = kw.pop("at")
        if at < last:
            raise SpecError(f"{source}:{lineno}: time {at:g}s goes backwards (after "
                            f"{last:g}s)")
        last = at
        if kw:
            events.append(ScheduleEvent(at, link, LinkChange(**kw)))
    return events


def load_trace(path: Path, link: str) -> list[ScheduleEvent]:
    """`parse_trace` on a file."""
    try:
        with open(path, newline="") as f:
            return parse_trace(f, link, source=str(path))
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the trace ({exc.strerror})") from None


# -- P3 presets (vertical handover) --------------------------------------------------

WLAN = LinkShape(bw_bps=20_000_000, delay_s=0.001, queue_pkts=100)
IMT2000 = LinkShape(bw_bps=384_000, delay_s=0.070, queue_pkts=100)
WIRED = LinkShape(bw_bps=100_000_000, delay_s=0.005, queue_pkts=100)
ACCESS = {"wlan": WLAN, "imt2000": IMT2000, "wired": WIRED}


def _as_change(shape: LinkShape, up: bool | None = None) -> LinkChange:
    return LinkChange(bw_bps=shape.bw_bps, delay_s=shape.delay_s, up=up)


def handover(link: str, at_s: float, to: LinkShape, outage_s: float = 0.0
             ) -> list[ScheduleEvent]:
    """A vertical handover: at ``at_s`` the link goes down for ``outage_s`` (if > 0),
    then comes back with ``to``'s rate and delay."""
    if outage_s < 0:
        raise SpecError(f"handover outage {outage_s:g}s is negative")
    if outage_s == 0:
        return [ScheduleEvent(at_s, link, _as_change(to))]
    return [ScheduleEvent(at_s, link, LinkChange(up=False)),
            ScheduleEvent(at_s + outage_s, link, _as_change(to, up=True))]


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

Applier = Callable[[ScheduleEvent], None]


@dataclass
class AppliedEvent:
    """One line of ``events.jsonl``."""

    t_planned: float
    t_applied: float
    link: str
    changes: dict[str, Any]
    error: str | None

    def to_json(self) -> str:
        return json.dumps({"t_planned": self.t_planned, "t_applied": self.t_applied,
                           "link": self.link, "changes": self.changes, "error": self.error})




class SchedulePlayer:
    """Applies events at ``t0 + at`` from a background thread.

    apply: called with each event (e.g. `Network.apply`); events: what to play;
    t0: the run's time origin on the ``time.time()`` clock; log: ``events.jsonl`` path
    (appended to, one line per event, flushed at once).  A failing event is logged with
    its error and the player goes on.
    """

    def __init__(self, apply: Applier, events: Iterable[ScheduleEvent], t0: float,
                 log: Path | None = None, clock: Callable[[], float] = time.time):
        self._apply = apply
        self.events = sorted(events, key=lambda e: e.at_s)
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
            planned = self.t0 + ev.at_s
            if not self._wait_until(planned):
                return
            error = None
            try:
                self._apply(ev)
            except Exception as exc:  # recorded; the schedule goes on
                error = str(exc) or type(exc).__name__
            rec = AppliedEvent(planned, self._clock(), ev.link, ev.change.as_record(), error)
            self.applied.append(rec)
            if self.log is not None:
                self.log.parent.mkdir(parents=True, exist_ok=True)
                with open(self.log, "a") as f:
                    f.write(rec.to_json() + "\n")
