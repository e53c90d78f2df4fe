"""Tables as the contract types them: each declared column of a bundle table (in
`testbed.results.columns`) is stored with its declared type, whatever the frame that
carried it held.

Without this, a column's stored type depended on its values: an int64 column with one
missing value became float64 in pandas, a float64 column that happened to hold only whole
numbers stayed int64, and a string column whose every value was missing had no type at all
(DuckDB's ``NULL``), so the same column read differently from run to run.  Here ``int64``
columns are stored as int64 (a missing value is a null; pandas reads such a column back
as float64, DuckDB as BIGINT), ``float64`` as float64, ``string`` as (large) string, ``bool`` as
bool.  A column whose values cannot take the declared type (a fraction in an int64
column) is stored as it is and named in the returned problems, for the caller to report:
it is a defect of the writer, which `tests/unit/test_typed_tables.py` and the study tests
catch.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.core.safefiles import atomic_write_bytes
from testbed.results.columns import BOOL, FLT, INT, STR, TABLES

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa


def arrow_type(dtype: str) -> pa.DataType:
    """The Arrow type a declared dtype is stored as."""
    import pyarrow as pa

    # large_string: what pandas writes for its strings (reads back as they were written)
    return {INT: pa.int64(), FLT: pa.float64(), STR: pa.large_string(), BOOL: pa.bool_()}[dtype]


def typed(name: str, data: pa.Table) -> tuple[pa.Table, list[str]]:
    """data with every column that table name declares cast to its declared type.

    Columns the table does not declare (swept keys, extra parameters) stay as they are.
    Returns the table and the columns that could not be cast (``"col: reason"``)."""
    import pyarrow as pa

    declared = {c.name: c.dtype for c in TABLES[name].columns}
    problems: list[str] = []
    for i, field in enumerate(data.schema):
        dtype = declared.get(field.name)
        if dtype is None:
            continue
        want = arrow_type(dtype)
        if field.type == want:
            continue
        if data.column(i).null_count == data.num_rows:  # nothing in it (an empty table)
            data = data.set_column(i, pa.field(field.name, want), pa.nulls(data.num_rows, want))
            continue
        if pa.types.is_null(field.type) or (dtype == STR and pa.types.is_string(
                field.type)) or _castable(field.type, dtype):
            try:
                data = data.set_column(i, pa.field(field.name, want),
                                       data.column(i).cast(want))
                continue
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                problems.append(f"{field.name}: {str(exc).splitlines()[0][:120]}")
                continue
        problems.append(f"{field.name}: holds {field.type}, declared {dtype}")
    return data, problems


def with_declared(name: str, data: pa.Table) -> pa.Table:
    """data with every column table name declares that it lacks added, null in every row
    and of its declared type, placed after the declared column before it: a bundle
    written before a later format added a column (docs/bundle.md "Format version") reads
    with the column, null, as the column's definition says."""
    import pyarrow as pa

    have = set(data.schema.names)
    previous = None
    for col in TABLES[name].columns:
        if col.name not in have:
            at = data.schema.get_field_index(previous) + 1 if previous is not None \
                else data.num_columns
            data = data.add_column(at, pa.field(col.name, arrow_type(col.dtype)),
                                   pa.nulls(data.num_rows, arrow_type(col.dtype)))
        previous = col.name
    return data


def _castable(have: pa.DataType, dtype: str) -> bool:
    """Whether a column stored as have may be cast to dtype without changing a value
    (a failed cast of a fraction or an overflow still raises)."""
    import pyarrow as pa

    numeric = pa.types.is_integer(have) or pa.types.is_floating(have)
    if dtype in (INT, FLT):
        return numeric or pa.types.is_boolean(have)
    if dtype == BOOL:
        return pa.types.is_boolean(have)
    return False


def typed_frame(name: str, df: pd.DataFrame) -> tuple[pa.Table, list[str]]:
    """`typed` of a pandas frame (its index dropped; NaN is a missing value).

    A column Arrow cannot hold as it is (a crafted metadata.json's integer beyond 64 bits)
    is stored as text and named in the problems, never an exception."""
    import pyarrow as pa

    try:
        return typed(name, pa.Table.from_pandas(df, preserve_index=False))
    except (OverflowError, pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        pass
    problems = []
    df = df.reset_index(drop=True).copy()
    for col in df.columns:
        try:
            pa.array(df[col], from_pandas=True)
        except (OverflowError, pa.ArrowInvalid, pa.ArrowTypeError,
                pa.ArrowNotImplementedError) as exc:
            df[col] = df[col].map(lambda v: None if v is None or v != v else str(v))
            problems.append(f"{col}: stored as text ({str(exc).splitlines()[0][:80]})")
    data, more = typed(name, pa.Table.from_pandas(df, preserve_index=False))
    return data, problems + more


def write_typed(name: str, df: pd.DataFrame, path: Path) -> list[str]:
    """Write df as table name's parquet file at path, atomically and typed (see `typed`);
    return the columns that could not take their declared type."""
    import pyarrow.parquet as pq

    data, problems = typed_frame(name, df)
    buf = io.BytesIO()
    pq.write_table(data, buf)
    atomic_write_bytes(Path(path), buf.getvalue())
    return problems


def mistyped(name: str, schema: pa.Schema) -> list[str]:
    """The declared columns of table name that a stored file's schema holds with another
    type than `typed` stores them with (``"col: int64, declared float64"``)."""
    declared = {c.name: c.dtype for c in TABLES[name].columns}
    return [f"{f.name}: {f.type}, declared {declared[f.name]}" for f in schema
            if f.name in declared and f.type != arrow_type(declared[f.name])]
