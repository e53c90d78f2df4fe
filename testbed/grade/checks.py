"""A rubric's checks run over a folder of (re-analysed) bundles: `run_checks`.

Each check's SQL runs on the DuckDB views of `testbed.results.query` (runs, flows,
timeseries, cwnd, ping, events, rtt) and must give one row of one number; anything else
(no row, several, text, NULL, a SQL error) is measured as nothing and fails, with the
reason in the feedback.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from testbed.grade.rubric import Assignment, Check
from testbed.grade.verify import Verification


@dataclass(frozen=True)
class CheckResult:
    """One check on one submission."""

    check: Check
    measured: float | None
    note: str = ""  # why nothing was measured

    @property
    def passed(self) -> bool:
        return self.check.passes(self.measured)

    @property
    def points(self) -> float:
        return self.check.points if self.passed else 0.0

    @property
    def feedback(self) -> str:
        text = self.check.pass_ if self.passed else self.check.fail
        return f"{text} ({self.note})" if self.note else text

    def measured_text(self) -> str:
        return "" if self.measured is None else f"{self.measured:.6g}"


@dataclass
class StudentResult:
    """One student's grading: checks, verification, the error that stopped it, figures."""

    student: str
    results: list[CheckResult] = field(default_factory=list)
    verification: Verification | None = None
    error: str | None = None
    figures: list[tuple[str, bytes]] = field(default_factory=list)  # (caption, PNG)

    @property
    def points(self) -> float:
        return float(sum(r.points for r in self.results))

    @property
    def verified(self) -> str:
        if self.error:
            return "error"
        return "ok" if self.verification is not None and self.verification.ok else "flagged"


def _one_number(rows: list[tuple], ncols: int) -> tuple[float | None, str]:
    if len(rows) != 1 or ncols != 1:
        return None, f"the query gave {len(rows)} row(s) of {ncols} column(s), not one number"
    value = rows[0][0]
    if value is None:
        return None, "nothing measured (the runs it needs are missing)"
    if isinstance(value, bool):
        return float(value), ""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None, f"the query gave {str(value)[:40]!r}, not a number"
    if math.isnan(number):
        return None, "nothing measured (NaN)"
    if math.isinf(number):  # lo <= inf <= inf would pass a min-only check
        return None, f"the query gave {number}, not a finite number"
    return number, ""


def run_checks(assignment: Assignment, workspace: Path) -> list[CheckResult]:
    """Every check of the assignment's rubric on the bundles of workspace, in rubric order.

    workspace: a folder of bundles (`testbed.grade.verify.rebuild`'s); raises `InputError`
    when it holds none (`testbed.results.query.connect`).
    """
    import duckdb

    from testbed.core.errors import InputError
    from testbed.results.query import connect, one_statement

    con = connect(workspace)
    out = []
    try:
        for check in assignment.rubric.check:
            try:
                one_statement(check.sql, "sql", select_only=True)  # as the rubric's loading
            except InputError as exc:
                out.append(CheckResult(check, None, f"the check's query was refused: {exc}"))
                continue
            try:
                cur = con.execute(check.sql)
                rows = cur.fetchall()
                value, note = _one_number(rows, len(cur.description or []))
            except duckdb.Error as exc:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
                if "does not have a column named" in first or "not found in FROM" in first:
                    note = ("nothing measured: the runs it needs are missing (no run has "
                            f"the parameter its query names: {first})")
                else:
                    note = f"the check's query failed: {first}"
                value = None
            out.append(CheckResult(check, value, note))
    finally:
        con.close()
    return out
