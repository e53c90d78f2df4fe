"""Quantities with units in specs: the pydantic types that parse them, and exact formatting.

`Rate`, `Duration`, `PositiveDuration`, `Size`, `Percent` (and the tighter `LinkRate`,
`LinkDelay` of a link's shape) parse a unit string through `testbed.core.units` once, at
validation, into base units (bit/s as int, seconds as float, bytes as int, percentage
points as float); dumping with ``mode="json"`` writes the shortest unit string that parses
back to the same number (the ``format_*_exact`` helpers).  A value that is not a
quantity is refused with a hint built from the user's number (`suggest_quantity`:
``"10 mbps"`` -> ``"10Mbit"``).  Code may also give numbers already in base units
(``ScheduleEvent(at=3.0, link="wifi", bw=2_000_000)``); a spec a user wrote may not
(`USER_TEXT`).
"""

from __future__ import annotations

import datetime
import json
import math
import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, ValidationInfo
from pydantic_core import PydanticCustomError

from testbed.core.errors import UnitError
from testbed.core.units import (
    MAX_DURATION_S,
    MAX_RATE_BPS,
    MAX_SIZE_BYTES,
    parse_duration,
    parse_percent,
    parse_rate,
    parse_size,
)


def format_rate_exact(bps: int) -> str:
    """A rate as the shortest unit string that parses back to exactly bps."""
    for unit, factor in (("Gbit", 10**9), ("Mbit", 10**6), ("kbit", 10**3)):
        if bps and bps % factor == 0:
            return f"{bps // factor}{unit}"
    return f"{bps}bit"


def format_duration_exact(seconds: float) -> str:
    """A duration as the shortest of s/ms/us/ns strings that parses back to exactly seconds."""
    best = f"{seconds!r}s"
    for unit, factor in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        text = f"{seconds / factor:.12g}{unit}"
        if "e" not in text and parse_duration(text) == seconds and len(text) < len(best):
            best = text
    return best


def format_size_exact(nbytes: int) -> str:
    """A size as the shortest unit string that parses back to exactly nbytes."""
    best = f"{nbytes}B"
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10),
                         ("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if nbytes and nbytes % factor == 0:
            text = f"{nbytes // factor}{unit}"
            if len(text) < len(best):
                best = text
    return best


def format_percent_exact(points: float) -> str:
    """A percentage as a string that parses back to exactly points."""
    text = f"{points:.12g}%"
    return text if parse_percent(text) == points else f"{points!r}%"


_UNIT_GUESSES: dict[str, dict[str, str]] = {
    "rate": {"bps": "bit", "b/s": "bit", "bit/s": "bit", "bits": "bit",
             "k": "kbit", "kbps": "kbit", "kb/s": "kbit", "kbit/s": "kbit", "kbits": "kbit",
             "m": "Mbit", "mbps": "Mbit", "mb/s": "Mbit", "mbit/s": "Mbit", "mbits": "Mbit",
             "mb": "Mbit", "g": "Gbit", "gbps": "Gbit", "gb/s": "Gbit", "gbit/s": "Gbit",
             "gbits": "Gbit", "gb": "Gbit"},
    "duration": {"": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s",
                 "msec": "ms", "msecs": "ms", "millisecond": "ms", "milliseconds": "ms",
                 "usec": "us", "usecs": "us", "microsecond": "us", "microseconds": "us",
                 "mins": "min", "minute": "min", "minutes": "min", "hr": "h", "hour": "h",
                 "hours": "h"},
    "size": {"": "B", "byte": "B", "bytes": "B", "k": "KB", "kbyte": "KB", "kbytes": "KB",
             "kilobyte": "KB", "kilobytes": "KB", "m": "MB", "mbyte": "MB", "mbytes": "MB",
             "megabyte": "MB", "megabytes": "MB", "g": "GB", "gbyte": "GB",
             "gigabyte": "GB", "gigabytes": "GB"},
    "percentage": {"": "%", "pct": "%", "percent": "%"},
}
_QUANTITY_RE = re.compile(r"^\s*(?P<num>[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*"
                          r"(?P<unit>[A-Za-z/%µ]*)\s*$")
_PARSERS: dict[str, Callable[[object], Any]] = {
    "rate": parse_rate, "duration": parse_duration, "size": parse_size,
    "percentage": parse_percent}


def suggest_quantity(value: Any, what: str) -> str | None:
    """A corrected unit string that keeps the user's number, or None when there is no guess.

    value: what the spec gave (``"10 mbps"``, ``4000000``, ``"5 sec"``); what: ``rate``,
    ``duration``, ``size`` or ``percentage``.  ``"10 mbps"`` -> ``"10Mbit"``.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and what == "rate":
        # a bare count of bit/s, but below 1000 it is no rate a link runs at (the lowest
        # allowed is 1kbit): `bw = 10` means 10 Mbit/s far more often than "10bit"
        guess = (f"{value}Mbit" if value < 1000 else format_rate_exact(value)) \
            if value > 0 else None
    elif isinstance(value, (int, float, str)):
        m = _QUANTITY_RE.match(str(value))
        unit = _UNIT_GUESSES.get(what, {}).get(m.group("unit").lower()) if m else None
        guess = f"{m.group('num')}{unit}" if m and unit is not None else None
    else:
        return None
    if guess is None:
        return None
    try:
        _PARSERS[what](guess)
    except (UnitError, KeyError):
        return None
    return guess


USER_TEXT = "user text: quantities carry units"
"""The validation context of a spec a user wrote (`testbed.spec.load.validate_spec`): there
every quantity must be a string with its unit, and a bare number is refused with a hint
(``4000000`` -> ``"4Mbit"``).  Values built in code (no context) may also be numbers that
are already in base units (``bw=2_000_000``, ``delay=0.07``); both are range-checked alike.
"""

_MOST: dict[str, tuple[float, str]] = {
    "rate": (MAX_RATE_BPS, "1Tbit"), "duration": (MAX_DURATION_S, "168h (one week)"),
    "size": (MAX_SIZE_BYTES, "1TiB"), "percentage": (100.0, "100%")}


def _base_number(value: int | float, what: str) -> int | float:
    """A number given in base units, checked as `testbed.core.units` checks a parsed one."""
    most, shown = _MOST[what]
    if not math.isfinite(value):
        raise PydanticCustomError("unit", f"{value!r} is not a {what}")
    if value > most:
        raise PydanticCustomError(
            "unit", f"{value!r} is too large for a {what}; the most allowed is {shown}")
    return value


def _quantity(parse: Callable[[object], Any], what: str, minimum: str,
              bounds: tuple[float, float, str] | None = None
              ) -> Callable[[Any, ValidationInfo], Any]:
    """A before-validator: parse a unit string, refuse negatives (and zero when minimum='>0').

    bounds: (lowest, highest, "how to say the range") for a value with a tighter range
    than its unit allows (a link's rate, delay); zero is allowed below lowest when minimum
    allows it.  Outside `USER_TEXT` a number is taken as already in base units.
    """

    def check(value: Any, info: ValidationInfo) -> Any:
        typed = isinstance(value, (int, float)) and not isinstance(value, bool) \
            and info.context != USER_TEXT  # a number in base units, from code
        if (isinstance(value, str) and value.strip().startswith("-")) or (typed and value < 0):
            need = "greater than zero" if minimum == ">0" else ">= 0"
            raise PydanticCustomError("negative",
                                      f"{value!r} is negative; a {what} must be {need}")
        try:
            parsed = _base_number(value, what) if typed else parse(value)
        except UnitError as exc:
            guess = suggest_quantity(value, what)
            text = (f"{show_value(value)} is not a {what}; did you mean {show_value(guess)}?"
                    if guess is not None else str(exc))
            raise PydanticCustomError("unit", text.replace("{", "(").replace("}", ")")) \
                from None
        if minimum == ">0" and parsed <= 0:
            raise PydanticCustomError("not_positive", f"{value!r} must be greater than zero")
        if bounds is not None:
            low, high, shown = bounds
            if parsed > high or (parsed and parsed < low):
                raise PydanticCustomError("out_of_range",
                                          f"{value!r} is out of range; use {shown}")
        return parsed

    return check


Rate = Annotated[int, BeforeValidator(_quantity(parse_rate, "rate", ">0")),
                 PlainSerializer(format_rate_exact, return_type=str, when_used="json")]
Duration = Annotated[float, BeforeValidator(_quantity(parse_duration, "duration", ">=0")),
                     PlainSerializer(format_duration_exact, return_type=str, when_used="json")]
PositiveDuration = Annotated[
    float, BeforeValidator(_quantity(parse_duration, "duration", ">0")),
    PlainSerializer(format_duration_exact, return_type=str, when_used="json")]
Size = Annotated[int, BeforeValidator(_quantity(parse_size, "size", ">0")),
                 PlainSerializer(format_size_exact, return_type=str, when_used="json")]
Percent = Annotated[float, BeforeValidator(_quantity(parse_percent, "percentage", ">=0")),
                    PlainSerializer(format_percent_exact, return_type=str, when_used="json")]

# A link's shape as the tc builders accept it (testbed.net.shaping.LinkShape): checked at load
# time, so that no schedule event fails mid-run.
LINK_RATE_BOUNDS = (1000, 10**10, "1kbit .. 10Gbit")
LINK_DELAY_BOUNDS = (0.0, 10.0, "0s .. 10s")
LinkRate = Annotated[int, BeforeValidator(_quantity(parse_rate, "rate", ">0",
                                                    LINK_RATE_BOUNDS)),
                     PlainSerializer(format_rate_exact, return_type=str, when_used="json")]
LinkDelay = Annotated[float, BeforeValidator(_quantity(parse_duration, "duration", ">=0",
                                                       LINK_DELAY_BOUNDS)),
                      PlainSerializer(format_duration_exact, return_type=str,
                                      when_used="json")]
# A socket buffer cap (transport.rmem/wmem): the kernel's tcp_rmem/tcp_wmem hold C ints
BUFFER_BOUNDS = (1024, 2**31 - 1, "1KiB .. 2GiB - 1")
BufferSize = Annotated[int, BeforeValidator(_quantity(parse_size, "size", ">0", BUFFER_BOUNDS)),
                       PlainSerializer(format_size_exact, return_type=str, when_used="json")]
# A sampling or echo period: a positive duration of at least 10 ms (and at most a week).
INTERVAL_BOUNDS = (0.01, 604800.0, "10ms .. 604800s (a week)")
Interval = Annotated[float, BeforeValidator(_quantity(parse_duration, "duration", ">0",
                                                      INTERVAL_BOUNDS)),
                     PlainSerializer(format_duration_exact, return_type=str, when_used="json")]


def show_value(value: Any) -> str:
    """A short, TOML-like rendering of an offending input value."""
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value) if len(value) < 60 else json.dumps(value[:57] + "...")
    if isinstance(value, (datetime.date, datetime.time)):  # TOML dates and times, as written
        return value.isoformat()
    return repr(value)
