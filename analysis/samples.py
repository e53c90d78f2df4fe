"""The raw JSON-lines files of a result bundle as tables with fixed columns.

Each loader returns a DataFrame with exactly the documented columns (empty when the file
is missing), so the parquet files always have the same schema.  A malformed line raises
`CaptureFormatError`-like `InputError` naming the file and line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from testbed.core.errors import InputError
from testbed.results import columns as C

# the columns of the metrics tables these files become are declared in testbed.results.columns
# (t_rel is added by the analysis)
CWND_COLUMNS = C.pandas_dtypes("cwnd", exclude=("t_rel",))
PING_COLUMNS = C.pandas_dtypes("ping", exclude=("t_rel",))
EVENT_COLUMNS = C.pandas_dtypes("events", exclude=("t_rel",))
# samples/flows.jsonl as the analysis reads it (joined into flows as workload, app_elapsed_s)
APPFLOW_COLUMNS = {"flow_id": "object", "workload": "object", "src": "object", "dst": "object",
                   "src_addr": "object", "dst_addr": "object", "sport": "Int64",
                   "dport": "Int64", "protocol": "object", "size_bytes": "Float64",
                   "duration_s": "Float64",
                   "bytes": "Float64", "start": "float64", "end": "float64",
                   "fct_s": "Float64", "error": "object"}


class SampleFormatError(InputError):
    """A malformed line in a bundle's samples/*.jsonl file."""


def read_jsonl(path: Path | None, columns: dict[str, str]) -> pd.DataFrame:
    """Load a JSON-lines file into exactly `columns` (name -> dtype); missing file: empty.

    path: the file; columns: schema (extra keys are dropped, missing ones are null).
    """
    records = []
    if path is not None and path.is_file():
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise SampleFormatError(f"{path}:{lineno}: not JSON ({exc.msg}); the file "
                                            "is corrupt, re-run or delete the line") from None
                if not isinstance(rec, dict):
                    raise SampleFormatError(f"{path}:{lineno}: expected a JSON object per line")
                records.append(rec)
    df = pd.DataFrame.from_records(records) if records else pd.DataFrame()
    out = pd.DataFrame(index=range(len(df)))
    for name, dtype in columns.items():
        col = df[name] if name in df.columns else pd.Series([None] * len(df), dtype=object)
        if name == "changes":
            col = col.map(lambda v: json.dumps(v, sort_keys=True) if v is not None else None)
        if dtype == "bool":
            col = col.fillna(False).astype(bool)
        elif dtype == "float64":
            col = pd.to_numeric(col, errors="coerce").astype("float64")
        elif dtype in ("Int64", "Float64"):
            col = pd.to_numeric(col, errors="coerce").astype(dtype)
        else:
            col = col.astype(object)
        out[name] = col.to_numpy() if dtype == "object" else col.array
    return out


def empty_appflows() -> pd.DataFrame:
    """An empty samples/flows.jsonl table (for captures analysed outside a bundle)."""
    return read_jsonl(None, APPFLOW_COLUMNS)
