"""``testbed query DIR "SQL"``: DuckDB over the result bundles of an output directory.

Views (each table has a ``run_id`` column to join on):

* ``runs``       one row per bundle: run_id, name, status, repetition, seed, times, error,
                 path, the swept parameters (columns named after their dotted keys, quote
                 them in SQL: ``"transport.cc"``) and the headline metrics.
* ``flows``, ``timeseries``, ``cwnd``, ``ping``, ``events``, ``rtt``: the bundles'
  ``metrics/<view>.parquet`` of every *complete* run, stacked (columns as in
  ``docs/bundle.md``, declared in ``testbed.results.columns``; a view without files has those
  columns and no rows).

Example::

    testbed query results/p2 'SELECT r."transport.cc", avg(f.throughput_bps)/1e6 AS mbps
                              FROM runs r JOIN flows f USING (run_id)
                              WHERE f.kind != '"'"'subflow'"'"' GROUP BY 1'
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.core import safefiles
from testbed.core.errors import InputError
from testbed.results.bundle import (
    BROKEN,
    COMPLETE,
    METRIC_TABLES,
    UNREADABLE,
)
from testbed.results.folders import bundles_at, not_bundles, sweep_folders, why_no_bundles
from testbed.results.summary import runs_frame
from testbed.results.typed import typed, typed_frame, with_declared

if TYPE_CHECKING:
    import duckdb
    import pandas as pd
    import pyarrow as pa
    from rich.table import Table

VIEWS = (*METRIC_TABLES, "rtt")  # rtt.parquet is not required: bundles before it lack it


def connect(out: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the views over DIR's bundles.

    out: the output directory of `testbed run`.  No path is put into SQL text: each
    metrics file is read here (a regular file inside its bundle, no symbolic link
    followed) and handed to DuckDB as an Arrow table, so a folder named with glob or quote
    characters cannot change what the query reads.

    Once the views exist, DuckDB's file and network access is switched off and its
    settings locked (`lock_down`): a statement sees the views and nothing else of the
    machine, so SQL written by somebody else (an assignment's rubric, a query copied from
    a page) cannot read, write or attach a file, or load an extension, as the root user
    the testbed runs as.
    """
    import duckdb

    out = Path(out)
    if not out.is_dir():
        what = "a file, not a results folder" if out.exists() else "no such results folder"
        raise InputError(f"{out}: {what}; give the --out DIR of `testbed run` (or one "
                         "run's bundle)")
    check_readable(out)
    con = duckdb.connect(":memory:")
    runs, _ = typed_frame("runs", runs_frame(out))  # each column as the contract types it
    con.register("runs_frame", runs)
    con.execute("CREATE VIEW runs AS SELECT * FROM runs_frame")
    for table, data in view_tables(out).items():
        if data is not None:
            con.register(f"{table}_data", data)
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM {table}_data")
        else:
            con.execute(f"CREATE VIEW {table} AS {_empty_sql(table)}")
    lock_down(con)
    return con


def lock_down(con: duckdb.DuckDBPyConnection) -> None:
    """Switch off the connection's access to files, the network and extensions
    (``enable_external_access``) and its spilling of large intermediate results into a
    ``.tmp`` folder of the working directory (``temp_directory``: none), and lock every
    setting (``lock_configuration``), so no later statement can switch them back on."""
    con.execute("SET temp_directory = ''")  # before: external access off forbids it
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def one_statement(sql: str, where: str, select_only: bool = False) -> str:
    """The one SQL statement of sql, or `InputError` (``where: ...``, one line) when it
    holds several or (select_only) one that is not a SELECT: a rubric's check may only
    read the views, never create, replace or drop what later checks read."""
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InputError(f"{where}: {first[:200]}") from None
    if not statements:
        raise InputError(f"{where}: no SQL given (blank, or only a comment); give one "
                         "SELECT over the views")
    if len(statements) > 1:
        raise InputError(f"{where}: {len(statements)} SQL statements; give one "
                         "(a SELECT over the views)")
    if select_only and statements[0].type != duckdb.StatementType.SELECT:
        kind = str(statements[0].type).rsplit(".", 1)[-1]
        raise InputError(f"{where}: a {kind} statement; a check is one SELECT over the "
                         "views (it may not create, change or drop anything)")
    return sql


def view_tables(out: Path) -> dict[str, pa.Table | None]:
    """Each view but ``runs`` (`VIEWS`): the ``metrics/<view>.parquet`` of every complete
    bundle of DIR stacked into one Arrow table with a leading run_id column; None for a
    view no complete bundle has a file of.

    out: the output directory (its bundles are read as in `connect`).
    """
    complete = [b for b in bundles_at(out) if b.status() == COMPLETE]
    tables: dict[str, pa.Table | None] = {}
    for table in VIEWS:
        files = [(b.run_id, safefiles.file_in(b.root, f"metrics/{table}.parquet"))
                 for b in complete]
        found = [(r, f) for r, f in files if f is not None]
        tables[table] = metrics_table(table, found) if found else None
    return tables


def metrics_table(table: str, files: list[tuple[str, Path]]) -> pa.Table:
    """`stacked_table` of one metrics table's files, each column of the contract's type
    whatever older writers stored, and a column added after a bundle was written present,
    null (`testbed.results.typed`)."""
    return with_declared(table, typed(table, stacked_table(files))[0])


def left_out(out: Path) -> list[str]:
    """What the views leave out of DIR that a user may expect in them, one line each:
    folders not read as bundles (`not_bundles`) and broken runs (in ``runs``, not in the
    metrics views)."""
    lines = not_bundles(out)
    for b in bundles_at(out):
        status, why = b.status_and_why()
        if status == BROKEN:
            lines.append(f"{b.root}: broken ({why}); in runs, left out of the other views")
    return lines


def check_readable(out: Path) -> None:
    """Raise `InputError` (one line naming the folder or file) when DIR holds no bundles
    or a bundle this user may not read.

    out: the output directory.
    """
    try:
        found = bundles_at(out)
        studies = [] if found else sweep_folders(out)
    except PermissionError as exc:
        raise InputError(f"{exc.filename or out}: permission denied") from None
    if not found:
        why = why_no_bundles(out)
        if why is not None and not studies:
            raise InputError(f"{out}: no result bundle read here: {why}")
        hint = (f"it is a study's output: query one spec's folder, e.g. {Path(out) / studies[0]}"
                if studies else "give the --out DIR of `testbed run`")
        raise InputError(f"{out}: no result bundles here (no <run-id>/metadata.json); {hint}")
    unreadable = [b for b in found if b.status() == UNREADABLE]
    if unreadable:
        first = unreadable[0]
        more = f" (and {len(unreadable) - 1} more of {len(found)} runs)" \
            if len(unreadable) > 1 else ""
        raise InputError(f"{first.metadata_path}: permission denied{more}; runs made with "
                         "sudo belong to root: query them with sudo, or give them to this user")


def _empty_sql(table: str) -> str:
    """A view with the documented columns (testbed.results.columns) and no rows."""
    from testbed.results.columns import names
    from testbed.results.columns import table as declared

    types = {"string": "VARCHAR", "int64": "BIGINT", "float64": "DOUBLE", "bool": "BOOLEAN"}
    cols = ", ".join(f"NULL::{types[declared(table).col(n).dtype]} AS \"{n}\""
                     for n in names(table) if n != "run_id")
    return f"SELECT NULL::VARCHAR AS run_id, {cols} WHERE false"


def stacked_table(files: list[tuple[str, Path]]) -> pa.Table:
    """One Arrow table of the given parquet files with a leading run_id column.

    files: (run id, path) pairs; columns are united by name (missing ones are null).
    """
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    if not files:
        return pa.table({"run_id": pa.array([], pa.string())})
    parts = []
    for run_id, path in files:
        try:
            t = pq.read_table(io.BytesIO(safefiles.read_bytes(path)))
        except PermissionError:
            raise InputError(f"{path}: permission denied") from None
        except (OSError, ValueError, pa.ArrowException) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise InputError(f"{path}: not a readable parquet table ({first})") from None
        if "run_id" in t.column_names:
            t = t.drop_columns(["run_id"])
        parts.append(t.add_column(0, "run_id", pa.array([run_id] * t.num_rows, pa.string())))
    try:
        # permissive: runs written by different writers may hold one column as string in
        # one file and large_string in another (a sweep resumed by a second process
        # did), or int64 beside a null column; such columns are widened, not refused
        return pa.concat_tables(parts, promote_options="permissive")
    except (ValueError, pa.ArrowException) as exc:
        raise InputError(f"the metrics tables of {len(parts)} runs do not fit together "
                         f"({str(exc).strip()[:200]})") from None


def run_query(out: Path, sql: str) -> pd.DataFrame:
    """Run sql over DIR's views; return a pandas DataFrame.

    out: the output directory; sql: one DuckDB SQL statement.
    """
    import duckdb

    if not sql.strip():
        raise InputError('query: no SQL given; e.g. testbed query DIR "SELECT * FROM runs"')
    one_statement(sql, "query")
    con = connect(out)
    try:
        result = con.execute(sql)
        if result is None or result.description is None:  # only a comment, a SET ...
            raise InputError("query: the statement returns no rows to show; give a SELECT "
                             f"over the views (runs, {', '.join(VIEWS)})")
        return result.df()
    except duckdb.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, duckdb.PermissionException) or "configuration has been locked" \
                in first:
            raise InputError(f"query: {first[:200]}; a query reads only the views (runs, "
                             f"{', '.join(VIEWS)}): no file, setting or extension (to keep a "
                             "result, print it with --csv and redirect it)") from None
        hint = _dotted_hint(con, first)
        raise InputError(f"query: {first} (views: runs, {', '.join(VIEWS)}){hint}") \
            from None
    finally:
        con.close()


def _dotted_hint(con: Any, error: str) -> str:
    """A hint for ``controller.kind`` written unquoted: SQL reads it as table.column, and
    the runs view's swept keys are columns named with dots (quote them)."""
    import re

    missing = re.search(r'Referenced table "([^"]+)" not found', error)
    if not missing:
        return ""
    try:
        cols = [r[0] for r in con.execute("DESCRIBE runs").fetchall()]
    except Exception:  # the hint is a courtesy; the error stands without it
        return ""
    keys = [c for c in cols if c.startswith(missing.group(1) + ".")]
    return f'; swept keys are columns named with dots: quote them, e.g. "{keys[0]}"' \
        if keys else ""


def render_table(df: pd.DataFrame, max_rows: int = 200) -> Table:
    """A rich Table of a DataFrame (first max_rows rows)."""
    from rich.table import Table

    table = Table(show_header=True, header_style="bold")
    for col in df.columns:
        table.add_column(str(col), overflow="fold")
    for row in df.head(max_rows).itertuples(index=False):
        table.add_row(*(_cell(v) for v in row))
    if len(df) > max_rows:
        table.caption = f"{len(df) - max_rows} more rows (use --csv for all)"
    return table


def render_records(df: pd.DataFrame, max_rows: int = 200) -> Table:
    """The rows of df one below the other, a (column, value) line each: what the
    terminal shows when `render_table` would have too many columns to fit it."""
    from rich.table import Table

    table = Table(show_header=True, header_style="bold")
    table.add_column("column", overflow="fold")
    table.add_column("value", overflow="fold")
    for i, row in enumerate(df.head(max_rows).itertuples(index=False)):
        if i:
            table.add_section()
        for col, v in zip(df.columns, row, strict=True):
            table.add_row(str(col), _cell(v))
    if len(df) > max_rows:
        table.caption = f"{len(df) - max_rows} more rows (use --csv for all)"
    return table


def fits(df: pd.DataFrame, width: int, min_column: int = 9) -> bool:
    """Whether df's columns fit a terminal width as a table (each at least min_column
    characters with its borders)."""
    return len(df.columns) * min_column <= width


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if value != value:
            return ""
        if abs(value) >= 1e6:  # epoch times, rates: every digit before the point
            return f"{value:.3f}".rstrip("0").rstrip(".")
        return f"{value:.6g}"
    return str(value)
