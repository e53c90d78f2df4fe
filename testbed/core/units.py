"""Quantities written with units in specs: rates, durations, sizes, percentages.

Each is parsed once into a plain number in base units:

* rate      ``"10Mbit"``, ``"384kbit"``, ``"1Gbit"``, ``"500bit"`` -> bits per second (int).
  Only *bit* units are accepted (decimal prefixes k/M/G/T); ``"4Mbps"`` is refused
  because tc reads ``mbps`` as megaBYTES per second.
* duration  ``"25us"``, ``"10ms"``, ``"1.5s"``, ``"2min"``, ``"1h"`` -> seconds (float).
* size      ``"1500B"``, ``"200KB"``, ``"20MB"``, ``"64KiB"``, ``"1GiB"`` -> bytes (int).
  KB/MB/GB are powers of 1000, KiB/MiB/GiB powers of 1024.
* percent   ``"1%"``, ``"0.5%"`` -> percentage points (float, 0..100).

Every value is finite and bounded (`MAX_RATE_BPS`, `MAX_DURATION_S`, `MAX_SIZE_BYTES`,
100 % for percentages), so no spec can produce ``inf`` or an integer too large for the
tools it is handed to. A malformed or out-of-range string raises `UnitError` with the
expected form.
"""

from __future__ import annotations

import math
import re

from testbed.core.errors import UnitError

_NUM = r"(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"

_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0,
                   "min": 60.0, "h": 3600.0}
_SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}

MAX_RATE_BPS = 10**12          # 1 Tbit/s
MAX_DURATION_S = 7 * 86400.0   # one week
MAX_SIZE_BYTES = 2**40         # 1 TiB

_RE = re.compile(r"^\s*(?P<full>" + _NUM + r")\s*(?P<unit>[A-Za-zµ%]+)\s*$")


def _split(text: object, what: str, example: str) -> tuple[float, str]:
    if isinstance(text, bool) or not isinstance(text, str):
        raise UnitError(f"{text!r} is not a {what}; use a string with a unit, e.g. {example!r}")
    m = _RE.match(text)
    if not m:
        raise UnitError(f"{text!r} is not a {what}; use e.g. {example!r}")
    value = float(m.group("full"))
    if not math.isfinite(value):
        raise UnitError(f"{text!r} is not a {what}; use e.g. {example!r}")
    return value, m.group("unit")


def _bounded(text: object, value: float, factor: float, limit: float, what: str,
             shown: str) -> float:
    """value x factor, refused (UnitError) when it is above limit; never inf/overflow."""
    if value > limit / factor:
        raise UnitError(f"{text!r} is too large for a {what}; the most allowed is {shown}")
    return value * factor


def parse_rate(text: object) -> int:
    """Parse a rate such as ``"10Mbit"`` into bits per second."""
    value, unit = _split(text, "rate", "4Mbit")
    factor = _RATE_UNITS.get(unit.lower())
    if factor is None:
        hint = " (tc reads 'mbps' as megabytes/s; write bits, e.g. '4Mbit')" \
            if unit.lower().endswith("ps") else ""
        raise UnitError(f"{text!r} is not a rate; use e.g. '4Mbit'{hint}")
    return round(_bounded(text, value, factor, MAX_RATE_BPS, "rate", "1Tbit"))


def parse_duration(text: object) -> float:
    """Parse a duration such as ``"25us"`` or ``"1.5s"`` into seconds."""
    value, unit = _split(text, "duration", "10ms")
    factor = _DURATION_UNITS.get(unit if unit == "µs" else unit.lower())
    if factor is None:
        raise UnitError(f"{text!r} is not a duration; use e.g. '10ms', '25us' or '1.5s'")
    return _bounded(text, value, factor, MAX_DURATION_S, "duration", "168h (one week)")


def parse_size(text: object) -> int:
    """Parse a size such as ``"64KiB"`` or ``"20MB"`` into bytes."""
    value, unit = _split(text, "size", "64KiB")
    factor = _SIZE_UNITS.get(unit.lower())
    if factor is None:
        raise UnitError(f"{text!r} is not a size; use e.g. '1500B', '200KB', '20MB' or '64KiB'")
    return round(_bounded(text, value, factor, MAX_SIZE_BYTES, "size", "1TiB"))


def parse_percent(text: object) -> float:
    """Parse a percentage such as ``"0.5%"`` into percentage points (0..100)."""
    value, unit = _split(text, "percentage", "1%")
    if unit != "%":
        raise UnitError(f"{text!r} is not a percentage; use e.g. '1%' or '0.5%'")
    if value > 100:
        raise UnitError(f"{text!r} is more than 100%")
    return value


def format_rate(bps: float) -> str:
    """A rate in the largest unit that keeps it an integer-ish readable string."""
    for unit, factor in (("Gbit", 10**9), ("Mbit", 10**6), ("kbit", 10**3)):
        if bps >= factor and (bps / factor) == round(bps / factor, 3):
            return f"{bps / factor:g}{unit}"
    return f"{bps:g}bit"


def format_duration(seconds: float) -> str:
    """A duration in s, ms or us."""
    if seconds == 0:
        return "0s"
    if seconds >= 1:
        return f"{seconds:g}s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:g}ms"
    return f"{seconds * 1e6:g}us"


def format_size(nbytes: float) -> str:
    """A size in B, KB, MB or GB (powers of 1000)."""
    for unit, factor in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if nbytes >= factor:
            return f"{nbytes / factor:g}{unit}"
    return f"{nbytes:g}B"
