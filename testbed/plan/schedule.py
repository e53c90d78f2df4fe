"""The run's link schedule, in time order.

An event (`testbed.spec.model.ScheduleEvent`, in base units since validation) changes any
of bw / delay / loss / jitter of a named link, or takes it down / up;
`testbed.net.network.Network` applies it and `testbed.net.schedule.SchedulePlayer` plays
a schedule on time (names checked against the topology by `testbed.plan.topology`).
"""

from __future__ import annotations

from testbed.spec.experiment import Experiment
from testbed.spec.model import ScheduleEvent


def schedule_events(exp: Experiment) -> list[ScheduleEvent]:
    """The spec's ``[[schedule]]`` in time order (stable), as the network plays them."""
    return sorted(exp.schedule, key=lambda e: e.at)
