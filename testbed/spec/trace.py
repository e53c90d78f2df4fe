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
the same ranges.  A bad file raises `SpecError` naming the file, the row (the file's line
number, the header being row 1) and the cell.

A spec names a trace in a ``[[schedule]]`` entry (``link``, ``trace``, optional ``at``
added to every row's time).  `expand_traces` replaces each such entry by its rows, as
plain event tables, before the spec validates, so that sweeps, ``--set``, run ids, the
dry run and the player only ever see events.  `TraceFolder` reads the files: only from
inside the spec's folder, never through a symbolic link, at most `MAX_TRACE_BYTES`.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, TextIO

from pydantic import Field, ValidationError

from testbed.core import safefiles
from testbed.core.errors import InputError, SpecError
from testbed.core.units import parse_duration, parse_percent, parse_rate
from testbed.spec.model import ScheduleEvent, SpecModel
from testbed.spec.problems import describe_error
from testbed.spec.quantities import USER_TEXT, Duration

MAX_TRACE_BYTES = 1 << 20  # 1 MiB: some 30 000 rows, far more than a run plays
MAX_TRACE_ROWS = 10_000


def _number(cell: str, times: float = 1.0, per: float = 1.0) -> float:
    """A plain-number cell times ``times`` divided by ``per``; ValueError for text that
    is no finite number (``inf``, ``nan``, ``1e400``)."""
    value = float(cell) * times / per
    if not math.isfinite(value):
        raise ValueError(cell)
    return value


# column -> (the ScheduleEvent field it sets, its cell in base units)
_TRACE_COLUMNS: dict[str, tuple[str, Callable[[str], int | float]]] = {
    "time": ("at", parse_duration),
    "time_s": ("at", _number),
    "bw": ("bw", parse_rate),
    "bw_mbit": ("bw", lambda v: round(_number(v, 1e6))),
    "bw_kbit": ("bw", lambda v: round(_number(v, 1e3))),
    "delay": ("delay", parse_duration),
    "delay_ms": ("delay", lambda v: _number(v, per=1e3)),
    "jitter": ("jitter", parse_duration),
    "jitter_ms": ("jitter", lambda v: _number(v, per=1e3)),
    "loss": ("loss", parse_percent),
    "loss_pct": ("loss", _number),
}


def parse_trace(stream: TextIO, link: str, source: str = "trace") -> list[ScheduleEvent]:
    """Parse a trace CSV (see the module docstring) into events for ``link``.

    stream: the CSV text; link: the link the trace drives; source: file name for errors.
    """
    return [ev for _, ev in trace_rows(stream, link, source)]


def trace_rows(stream: TextIO, link: str, source: str = "trace"
               ) -> list[tuple[int, ScheduleEvent]]:
    """`parse_trace` with each event's row (the file's line number, the header is row 1);
    rows that only give a time are left out."""
    reader = csv.reader(stream)
    try:
        header = [h.strip().lower() for h in next(reader)]
    except StopIteration:
        raise SpecError(f"{source}: empty trace; expected a header such as "
                        "'time,bw,delay,loss'") from None
    except csv.Error as exc:
        raise SpecError(f"{source} row 1: not CSV ({exc})") from None
    unknown = [h for h in header if h not in _TRACE_COLUMNS]
    if unknown:
        raise SpecError(f"{source}: unknown column(s) {', '.join(unknown)}; use "
                        f"{', '.join(_TRACE_COLUMNS)}")
    fields = [_TRACE_COLUMNS[h][0] for h in header]
    if "at" not in fields:
        raise SpecError(f"{source}: needs a 'time' (or 'time_s') column")
    twice = sorted({h for h, f in zip(header, fields, strict=True) if fields.count(f) > 1})
    if twice:
        raise SpecError(f"{source}: columns {', '.join(twice)} set the same value; keep one")
    events: list[tuple[int, ScheduleEvent]] = []
    last = -1.0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise SpecError(f"{source} row {reader.line_num}: not CSV ({exc})") from None
        where = f"{source} row {reader.line_num}"
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise SpecError(f"{where}: {len(row)} cells, header has {len(header)}")
        values: dict[str, int | float] = {}
        cells: dict[str, tuple[str, str]] = {}  # field -> (column, cell), for errors
        for name, cell in zip(header, row, strict=True):
            cell = cell.strip()
            if not cell:
                continue
            fld, parse = _TRACE_COLUMNS[name]
            try:
                values[fld] = parse(cell)
            except InputError as exc:
                raise SpecError(f"{where}: column {name!r}: {exc}") from None
            except ValueError:
                raise SpecError(f"{where}: column {name!r} has {cell!r}: not a finite number") \
                    from None
            cells[fld] = (name, cell)
        if "at" not in values:
            raise SpecError(f"{where}: the time cell is empty")
        at = values["at"]
        if at < last:
            raise SpecError(f"{where}: time {at:g}s goes backwards (after {last:g}s)")
        last = at
        if len(values) > 1:
            if len(events) == MAX_TRACE_ROWS:
                raise SpecError(f"{where}: more than {MAX_TRACE_ROWS} rows; split the trace "
                                "or thin it out")
            events.append((reader.line_num, _event(link, values, cells, where)))
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
    """`parse_trace` on a file (any path; a spec's traces go through `TraceFolder`)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            return parse_trace(f, link, source=str(path))
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the trace ({exc.strerror})") from None


# -- trace entries of a spec -----------------------------------------------------------

class ScheduleTrace(SpecModel):
    """A ``[[schedule]]`` entry that names a trace: link, the file, an offset for its times."""

    link: Annotated[str, Field(min_length=1)]
    trace: Annotated[str, Field(min_length=1)]
    at: Duration = 0.0


class TraceFolder:
    """The trace files a spec names, read from its folder once each.

    folder: the spec file's folder.  A name is a relative path below it (``traces/lte.csv``);
    an absolute path, a ``..`` part, a symbolic link anywhere on the way, or anything but a
    regular file is refused, as is a file above `MAX_TRACE_BYTES`.
    """

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._read: dict[tuple[str, str], list[tuple[int, ScheduleEvent]]] = {}

    def rows(self, name: str, link: str) -> list[tuple[int, ScheduleEvent]]:
        """The (row, event) pairs of trace file name driving link; `SpecError` naming the
        file (as the spec wrote it) when it cannot be used."""
        key = (name, link)
        if key not in self._read:
            self._read[key] = trace_rows(io.StringIO(self._text(name), newline=""), link, name)
        return self._read[key]

    def _text(self, name: str) -> str:
        rel = PurePosixPath(name)
        if rel.is_absolute() or ".." in rel.parts:
            raise SpecError(f"{name}: give a path relative to the spec's folder, without "
                            "'..' (e.g. 'traces/lte.csv'); copy the trace next to the spec")
        path = self.folder / rel
        why = safefiles.check(self.folder, path, "file")
        if why == "missing":
            raise SpecError(f"{name}: no such trace file next to the spec (in {self.folder})")
        if why is not None:
            raise SpecError(f"{name}: {why}; give the trace itself, as a regular file")
        try:
            data = safefiles.read_bytes(path, limit=MAX_TRACE_BYTES)
        except safefiles.FileTooLargeError:
            raise SpecError(f"{name}: larger than {MAX_TRACE_BYTES} bytes; split the trace "
                            "or thin it out") from None
        except (safefiles.UnsafeFileError, OSError) as exc:
            raise SpecError(f"{name}: cannot read the trace ({exc})") from None
        try:
            return data.decode("utf-8-sig")  # a spreadsheet's byte-order mark is not text
        except UnicodeDecodeError:
            raise SpecError(f"{name}: not UTF-8 text; save the trace as a CSV file") from None


@dataclass(frozen=True)
class Origin:
    """Where an expanded ``[[schedule]]`` entry came from: its index in the spec as written,
    and for a trace row the file and the row."""

    index: int
    trace: str | None = None
    row: int | None = None


_SCHEDULE_KEY = re.compile(r"^schedule\[(\d+)\]")


@dataclass
class Expanded:
    """A spec dict with its trace entries replaced by their rows (`expand_traces`).

    data: the spec to validate; origins: for each entry of its schedule, where it came
    from; problems: the trace entries' own problems, one line each (key path first).
    """

    data: dict[str, Any]
    origins: list[Origin] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def as_written(self, problems: list[str]) -> list[str]:
        """problems (key path first) with schedule indices as the spec wrote them; a trace
        row's problem is named ``schedule[i].trace: FILE row N, key: ...``."""
        out: list[str] = []
        for line in problems:
            m = _SCHEDULE_KEY.match(line)
            k = int(m.group(1)) if m else -1
            if m and 0 <= k < len(self.origins):
                origin, rest = self.origins[k], line[m.end():]
                if origin.trace is None or rest.startswith(".link"):
                    line = f"schedule[{origin.index}]{rest}"
                else:
                    line = (f"schedule[{origin.index}].trace: {origin.trace} row {origin.row}"
                            + (f", {rest[1:]}" if rest.startswith(".") else rest))
            if line not in out:
                out.append(line)
        return out


def expand_traces(data: dict[str, Any], traces: TraceFolder | None) -> Expanded:
    """data with every ``[[schedule]]`` entry that has ``trace`` replaced by one plain event
    table per row (time + the entry's ``at``); data itself is not changed.

    traces: where to read the files (None: a trace entry is a problem, e.g. in a spec
    that came without its folder).  An entry with a problem is left out (its problem is
    in the result), so that the rest of the spec still validates and every problem is
    reported at once.
    """
    schedule = data.get("schedule")
    if not isinstance(schedule, list) or not any(
            isinstance(e, dict) and "trace" in e for e in schedule):
        return Expanded(data, [Origin(i) for i in range(len(schedule))]
                        if isinstance(schedule, list) else [])
    out = Expanded({**data, "schedule": []})
    for i, entry in enumerate(schedule):
        if not (isinstance(entry, dict) and "trace" in entry):
            out.data["schedule"].append(entry)
            out.origins.append(Origin(i))
            continue
        try:
            rows = _entry_rows(data, i, entry, traces)
        except SpecError as exc:
            out.problems.extend(str(exc).splitlines())
            continue
        for row, event in rows:
            out.data["schedule"].append(event)
            out.origins.append(Origin(i, str(entry["trace"]), row))
    return out


def _entry_rows(data: dict[str, Any], i: int, entry: dict[str, Any],
                traces: TraceFolder | None) -> list[tuple[int, dict[str, Any]]]:
    """The rows of trace entry i as event tables (unit strings), or `SpecError`."""
    where = f"schedule[{i}]"
    problems = [f"{where}.{k}: a trace entry takes only link, trace and at; put {k} in "
                "the trace's columns or in an entry of its own"
                for k in entry if k not in ScheduleTrace.model_fields]
    known = {k: v for k, v in entry.items() if k in ScheduleTrace.model_fields}
    try:
        spec = ScheduleTrace.model_validate(known, context=USER_TEXT)
    except ValidationError as exc:
        problems += dict.fromkeys(
            describe_error({**err, "loc": ("schedule", i, *err["loc"])}, data)
            for err in exc.errors(include_url=False))
        raise SpecError("\n".join(problems)) from None
    if traces is None:
        problems.append(f"{where}.trace: a trace is read only with the spec file it sits "
                        "next to; run the spec file itself")
        raise SpecError("\n".join(problems))
    try:
        rows = traces.rows(spec.trace, spec.link)
    except SpecError as exc:
        problems.append(f"{where}.trace: {exc}")
        raise SpecError("\n".join(problems)) from None
    if problems:
        raise SpecError("\n".join(problems))
    if not rows:
        raise SpecError(f"{where}.trace: {spec.trace} has no row that changes anything; "
                        "give rows with a time and at least one of bw, delay, jitter, loss")
    return [(row, ev.model_copy(update={"at": round(spec.at + ev.at, 9)})
             .model_dump(mode="json", exclude_none=True)) for row, ev in rows]
