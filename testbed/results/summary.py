"""The runs table of an output folder and its ``summary.parquet``.

One row per bundle (`run_row`): identity and status from the bundle itself, the phase
times, the fidelity verdict (``fidelity*`` columns), the swept parameters (one column
per dotted key, `param_column`) and the headline metrics.  ``summary.parquet`` is that
table, rewritten atomically when a sweep ends or is interrupted (`write_summary`).  Its
columns are declared in `testbed.results.columns` (table RUNS).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.results.bundle import Bundle
from testbed.results.columns import FLT, INT, table
from testbed.results.folders import bundles_at

if TYPE_CHECKING:
    import pandas as pd

SUMMARY = "summary.parquet"


def _flat(prefix: str, value: Any, into: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, into)
    else:
        into[prefix] = value


IDENTITY_COLUMNS = ("run_id", "name", "status", "repetition", "seed", "started", "ended",
                    "wall_s", "error", "path")
PARAM_PREFIX = "param:"
# the checks of analysis.fidelity.assess that become summary columns ``fidelity_<check>``
FIDELITY_CHECKS = ("rate_ratio_min", "rate_over_max", "rtt_excess_ms_max", "first_rtt_ms",
                   "event_late_ms_max", "cpu_saturated_share", "cpu_busiest_mean",
                   "emulator_ooo_ratio_max", "softnet_dropped", "ovs_upcalls_lost",
                   "controller_restarts")
FIDELITY_COLUMNS = ("fidelity", "fidelity_reasons", *(f"fidelity_{k}" for k in FIDELITY_CHECKS))
# the columns a run's own record sets (identity, fidelity, phase times and headline, every
# column the contract declares); a swept key of the same name gets ``param:<key>``
PROTECTED_COLUMNS = tuple(dict.fromkeys((*IDENTITY_COLUMNS, *FIDELITY_COLUMNS,
                                         *table("runs").names())))


def param_column(key: str, taken: set[str] | tuple[str, ...] = PROTECTED_COLUMNS) -> str:
    """The summary column of swept key: the key itself (``transport.cc``), or
    ``param:<key>`` when that name is an identity column (``seed``, ``status``, ...), a
    fidelity column (``fidelity``, ``fidelity_*``), a headline column (``flows``,
    ``bytes``, ...) or a phase-time column (``*_s`` without a dot), so no parameter
    replaces them."""
    key = str(key)
    if key in taken or (key.endswith("_s") and "." not in key) or \
            key.startswith(PARAM_PREFIX):
        return PARAM_PREFIX + key
    return key


def fidelity_columns(fidelity: dict[str, Any] | None) -> dict[str, Any]:
    """The ``fidelity*`` columns of summary.parquet and the runs view for one run, from
    its ``fidelity`` section (`analysis.fidelity.assess`; docs/fidelity.md)."""
    fid = fidelity if isinstance(fidelity, dict) else {}  # metadata.json may be crafted
    checks = fid.get("checks")
    checks = checks if isinstance(checks, dict) else {}
    reasons = fid.get("reasons")
    reasons = [str(r) for r in reasons] if isinstance(reasons, list) else []
    verdict = fid.get("verdict", "unknown")
    out: dict[str, Any] = {"fidelity": verdict if verdict is None or isinstance(verdict, str)
                           else str(verdict),
                           "fidelity_reasons": "; ".join(reasons) or None}
    for key in FIDELITY_CHECKS:
        val = checks.get(key)
        out[f"fidelity_{key}"] = _number(val)
    return out


def _number(value: Any) -> float | None:
    """value as a float, or None when it is absent or not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def run_row(bundle: Bundle) -> dict[str, Any]:
    """One row of the runs table: identity, status, times, swept values, headline metrics.

    Identity and status come from the bundle itself (folder name, `Bundle.status`); a
    swept key named like one of them gets its own column (`param_column`), and a headline
    metric never replaces a column already set.
    """
    meta = bundle.read_metadata() or {}
    status, why = bundle.status_and_why()
    row: dict[str, Any] = {
        "run_id": bundle.run_id,
        "name": meta.get("name"),
        "status": status,
        "repetition": meta.get("repetition"),
        "seed": meta.get("seed"),
        "started": meta.get("started"),
        "ended": meta.get("ended"),
        "wall_s": meta.get("wall_s"),
        "error": meta.get("error") or why,  # why a run is broken, when it is
        "path": str(bundle.root),
    }
    timing = meta.get("timing")
    for phase, secs in (timing.items() if isinstance(timing, dict) else ()):
        if phase != "done" and f"{phase}".replace("-", "").isidentifier():
            row[f"{phase.replace('-', '')}_s"] = secs
    row.update(fidelity_columns(meta.get("fidelity")))
    params = meta.get("params")
    for key, value in (params.items() if isinstance(params, dict) else ()):
        row[param_column(key)] = value
    headline: dict[str, Any] = {}
    hl = meta.get("headline")
    _flat("", hl if isinstance(hl, dict) else {}, headline)
    for key, value in headline.items():
        row.setdefault(key, value)
    return row


def runs_frame(out: Path) -> pd.DataFrame:
    """The runs table (a pandas DataFrame) built from every bundle's metadata.json."""
    import pandas as pd

    rows = [run_row(b) for b in bundles_at(out)]
    df = pd.DataFrame(rows, columns=None if rows else list(IDENTITY_COLUMNS))
    for col in df.columns:
        df[col] = _uniform(_declared(col, df[col]))
    # every declared column, null where no run has it (no run analysed yet: no headline)
    for i, col in enumerate(table("runs").columns):
        if col.name not in df:
            null = pd.Series([None] * len(df), dtype="float64" if col.dtype in (FLT, INT)
                             else "object")
            df.insert(min(i, len(df.columns)), col.name, null)
    return df


def _declared(name: str, col: pd.Series) -> pd.Series:
    """A numeric column declared in `testbed.results.columns` (table RUNS) as float64,
    whatever its values: a column whose every value is null is otherwise untyped
    (``object``), so the same column's type would depend on the runs a folder holds.  A
    value that is no number (a crafted metadata.json's ``"fast"``) is null, so one run
    cannot turn the column into text for every run of the folder."""
    try:
        kind = table("runs").col(name).dtype
    except KeyError:
        return col
    if kind not in (FLT, INT):
        return col

    def number(v: Any) -> bool:  # a number parquet can hold (10**400 is none)
        return isinstance(v, int | float) and not isinstance(v, bool) and _storable(v)

    values = [v for v in col if v is not None and v == v]
    if not all(number(v) for v in values):
        col = col.map(lambda v: v if number(v) else None)
        values = [v for v in values if number(v)]
    if kind == FLT or len(values) < len(col):
        return col.astype("float64")
    return col


def _storable(v: int | float) -> bool:
    """Whether parquet holds v as a number: a float, or an int that fits 64 bits."""
    return not isinstance(v, int) or -(1 << 63) <= v < (1 << 63)


def _uniform(col: pd.Series) -> pd.Series:
    """Make a column storable in parquet: one scalar type, else JSON text (as is an int
    too large for 64 bits)."""
    values = [v for v in col if v is not None and v == v]
    kinds = {type(v) for v in values}
    if int in kinds and not all(_storable(v) for v in values if type(v) is int):
        kinds.add(dict)  # text: no number type holds it
    if kinds == {int, float}:
        return col.astype("float64")
    if len(kinds) <= 1 and not kinds & {list, dict}:
        return col
    return col.map(lambda v: None if v is None or (isinstance(v, float) and v != v) else
                   (v if isinstance(v, str) else json.dumps(v, sort_keys=True)))


def write_summary(out: Path) -> Path:
    """Rewrite ``DIR/summary.parquet`` (atomically) from the bundles; return its path."""
    from testbed.results.typed import write_typed

    path = Path(out) / SUMMARY
    # an int64 column with a null: pandas made it float64; the file keeps int64.  A
    # crafted metadata.json's value that cannot take its column's type stays as it is.
    write_typed("runs", runs_frame(out), path)
    return path


def take_analysis(meta: dict[str, Any], headline: dict[str, Any] | None) -> None:
    """Store what `testbed.run.execute.analyze_run` returned: the headline metrics, and the
    fidelity verdict it carries under ``fidelity`` as its own section."""
    headline = dict(headline or {})
    fid = headline.pop("fidelity", None)
    if fid is not None:
        meta["fidelity"] = fid
    meta["headline"] = headline


def fidelity_line(meta: dict[str, Any]) -> str | None:
    """One console line with a run's fidelity verdict (None before its analysis)."""
    fid = meta.get("fidelity")
    if not isinstance(fid, dict):
        return None
    reasons = fid.get("reasons") or []
    text = f"  fidelity {fid.get('verdict')}"
    if reasons and fid.get("verdict") != "ok":
        text += f": {reasons[0].split(': ', 1)[-1]}"
        if len(reasons) > 1:
            text += f" (and {len(reasons) - 1} more in metadata.json)"
    return text
