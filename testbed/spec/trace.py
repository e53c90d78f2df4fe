"""Link traces: a CSV file of timed changes to one link, read into `ScheduleEvent` s.

A trace has a header naming its columns, then one row per change.  Columns ``time``,
``bw``, ``delay``, ``loss`` (and optionally ``jitter``) take values with units
(``1.5s``, ``10Mbit``, ``20ms``, ``1%``); ``time_s``, ``bw_mbit``, ``bw_kbit``,
``delay_ms``, ``jitter_ms``, ``loss_pct`` take bare numbers.  An empty cell keeps the
previous value::

    time,bw,delay,loss
    0s,10Mbit,10ms,0%
    1.5s,2Mbit,,
    3s,,70ms,1%

Reading a trace is input validation: unit cells are parsed by `testbed.core.units`, and
each row becomes the same `ScheduleEvent` a spec's ``[[schedule]]`` validates into, with
the same ranges.  A bad file raises `SpecError` naming the file, the line and the column.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError

from testbed.core.errors import InputError, SpecError
from testbed.core.units import parse_duration, parse_percent, parse_rate
from testbed.spec.model import ScheduleEvent

# column -> (the ScheduleEvent field it sets, its cell in base units)
_TRACE_COLUMNS: dict[str, tuple[str, Callable[[str], int | float]]] = {
    "time": ("at", parse_duration),
    "time_s": ("at", float),
    "bw": ("bw", parse_rate),
    "bw_mbit": ("bw", lambda v: round(float(v) * 1e6)),
    "bw_kbit": ("bw", lambda v: round(float(v) * 1e3)),
    "delay": ("delay", parse_duration),
    "delay_ms": ("delay", lambda v: float(v) / 1e3),
    "jitter": ("jitter", parse_duration),
    "jitter_ms": ("jitter", lambda v: float(v) / 1e3),
    "loss": ("loss", parse_percent),
    "loss_pct": ("loss", float),
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
        values: dict[str, int | float] = {}
        cells: dict[str, tuple[str, str]] = {}  # field -> (column, cell), for errors
        for name, cell in zip(header, row, strict=True):
            cell = cell.strip()
            if not cell:
                continue
            field, parse = _TRACE_COLUMNS[name]
            try:
                values[field] = parse(cell)
            except (InputError, ValueError):
                raise SpecError(f"{source}:{lineno}: column {name!r} has {cell!r}") from None
            cells[field] = (name, cell)
        if "at" not in values:
            raise SpecError(f"{source}:{lineno}: the time cell is empty")
        at = values["at"]
        if at < last:
            raise SpecError(f"{source}:{lineno}: time {at:g}s goes backwards (after "
                            f"{last:g}s)")
        last = at
        if len(values) > 1:
            events.append(_event(link, values, cells, f"{source}:{lineno}"))
    return events


def _event(link: str, values: dict[str, int | float], cells: dict[str, tuple[str, str]],
           where: str) -> ScheduleEvent:
    """The row's event; a value out of its range raises `SpecError` naming its column."""
    try:
        return ScheduleEvent(link=link, **values)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        field = str(err["loc"][0]) if err["loc"] else "link"
        name, cell = cells.get(field, ("link", link))
        raise SpecError(f"{where}: column {name!r} has {cell!r}: {err['msg']}") from None


def load_trace(path: Path, link: str) -> list[ScheduleEvent]:
    """`parse_trace` on a file."""
    try:
        with open(path, newline="") as f:
            return parse_trace(f, link, source=str(path))
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the trace ({exc.strerror})") from None
