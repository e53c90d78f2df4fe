"""Each declared column is stored with its declared type, whatever its values
(testbed.results.typed)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from testbed.results.columns import TABLES
from testbed.results.typed import arrow_type, mistyped, typed_frame, write_typed

GOLDEN = Path(__file__).parent.parent / "data" / "analysis" / "golden-bundles"


def test_values_do_not_decide_a_columns_type(tmp_path):
    df = pd.DataFrame({
        "t": [0.0, 0.1], "t_rel": [0.0, 0.1], "key": ["f", "f"],
        "kind": ["flow", "flow"], "capture": [None, None],   # all-null string
        "bytes": [1500.0, np.nan],                            # int64 with a gap
        "rate_bps": [8, 16],                                  # float64 holding whole numbers
    })
    assert write_typed("timeseries", df, tmp_path / "t.parquet") == []
    schema = pq.read_schema(tmp_path / "t.parquet")
    assert schema.field("capture").type == pa.large_string()
    assert schema.field("bytes").type == pa.int64()
    assert schema.field("rate_bps").type == pa.float64()
    assert mistyped("timeseries", schema) == []
    con = duckdb.connect()
    con.register("t", pq.read_table(tmp_path / "t.parquet"))
    types = {r[0]: r[1] for r in con.execute("DESCRIBE t").fetchall()}
    assert (types["capture"], types["bytes"], types["rate_bps"]) == ("VARCHAR", "BIGINT", "DOUBLE")
    assert con.execute("SELECT bytes FROM t").fetchall() == [(1500,), (None,)]


def test_a_value_that_cannot_take_its_type_is_kept_and_named():
    df = pd.DataFrame({"t": [0.0], "key": ["f"], "bytes": [1.5], "kind": [3]})
    data, problems = typed_frame("timeseries", df)
    assert data.column("bytes").to_pylist() == [1.5]          # not truncated to 1
    assert [p.split(":")[0] for p in problems] == ["bytes", "kind"]
    assert sorted(line.split(":")[0] for line in mistyped("timeseries", data.schema)) == \
        ["bytes", "kind"]


def test_undeclared_columns_stay_as_they_are():
    df = pd.DataFrame({"run_id": ["r"], "transport.cc": [None], "flows": [2]})
    data, problems = typed_frame("runs", df)
    assert problems == []
    assert data.schema.field("transport.cc").type == pa.null()
    assert data.schema.field("flows").type == pa.int64()


def test_every_golden_table_is_stored_as_declared():
    files = sorted(GOLDEN.glob("*/*.parquet"))
    checked = 0
    for f in files:
        if f.stem in TABLES:
            assert mistyped(f.stem, pq.read_schema(f)) == [], f
            checked += 1
    assert checked >= 40


def test_every_declared_dtype_has_a_stored_type():
    for t in TABLES.values():
        for c in t.columns:
            assert arrow_type(c.dtype) is not None


def test_an_integer_beyond_64_bits_is_text_not_a_crash():
    # a crafted metadata.json's swept value: query, check and grade stopped on it
    df = pd.DataFrame({"run_id": ["a", "b"], "x.huge": [2**64, 1], "flows": [2, None]})
    data, problems = typed_frame("runs", df)
    assert data.column("x.huge").to_pylist() == [str(2**64), "1"]
    assert data.schema.field("flows").type == pa.int64()
    assert [p.split(":")[0] for p in problems] == ["x.huge"]


def test_a_column_a_later_format_added_reads_as_null_of_its_type():
    """A cwnd table written before format 1.8 has no sample_s: read, it has the column,
    null, float64, after t (where the registry declares it); a table that has it keeps
    it as it is."""
    from testbed.results.typed import with_declared

    old = pa.table({"run_id": ["r1", "r1"], "t": [1.0, 2.0], "host": ["a", "a"],
                    "cwnd": [10.0, 11.0]})
    read = with_declared("cwnd", old)
    names = read.schema.names
    assert names[:4] == ["run_id", "t", "sample_s", "host"]
    assert read.schema.field("sample_s").type == pa.float64()
    assert read.column("sample_s").null_count == 2
    assert set(names) >= {c.name for c in TABLES["cwnd"].columns}
    new = old.append_column("sample_s", pa.array([0.1, 0.2]))
    assert with_declared("cwnd", new).column("sample_s").to_pylist() == [0.1, 0.2]
