"""The run's link schedule: `ScheduleEvent` s in base units, in time order.

An event changes any of bw / delay / loss / jitter of a named link, or takes it down /
up; `testbed.net.network.Network` applies it and `testbed.net.schedule.SchedulePlayer`
plays a schedule on time.  `schedule_events` turns the spec's ``[[schedule]]`` into
events (names checked against the topology by `testbed.plan.topology`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from testbed.spec.linkshape import LinkShape
from testbed.spec.model import Experiment


@dataclass(frozen=True)
class LinkChange:
    """What an event changes; None means "leave as it is".

    bw_bps / delay_s / jitter_s / loss_pct: new values; up: False takes the link down,
    True brings it back (after the other changes are applied).
    """

    bw_bps: int | None = None
    delay_s: float | None = None
    jitter_s: float | None = None
    loss_pct: float | None = None
    up: bool | None = None

    def shape_changes(self) -> dict[str, float]:
        """The `LinkShape` fields this change sets."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "up" and getattr(self, f.name) is not None}

    def as_record(self) -> dict[str, float | bool]:
        """The change in base units, for ``events.jsonl``."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}

    def apply_to(self, shape: LinkShape) -> LinkShape:
        """shape with this change's values."""
        return shape.changed(**self.shape_changes()) if self.shape_changes() else shape


@dataclass(frozen=True)
class ScheduleEvent:
    """At ``at_s`` seconds after the run's origin, change ``link`` by ``change``."""

    at_s: float
    link: str
    change: LinkChange


def schedule_events(exp: Experiment) -> list[ScheduleEvent]:
    """The spec's ``[[schedule]]`` as `ScheduleEvent` s, sorted by time (stable)."""
    out = []
    for ev in exp.schedule:
        out.append(ScheduleEvent(ev.at, ev.link, LinkChange(
            bw_bps=ev.bw, delay_s=ev.delay, jitter_s=ev.jitter, loss_pct=ev.loss,
            up=None if ev.down is None else not ev.down)))
    return sorted(out, key=lambda e: e.at_s)
