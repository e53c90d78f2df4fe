"""A class graded: `grade_class(submissions, assignment, out)` and `check_bundle`.

Each student's submission is taken in (`intake`) into a temporary folder, re-analysed
(`verify`), checked (`checks`), and its figures drawn while the folder exists; a student
whose submission cannot be taken in or re-analysed gets one ``error`` row with the reason
and grading goes on.  Written into out (never inside the submissions folder):

* ``gradebook.csv``: student, check, expected, measured, points, feedback; per student one
  row per check, a ``verification`` row, an ``error`` row when it failed, and a ``total``
  row (expected: the maximum points);
* ``totals.csv``: student, points, max_points, verified, error;
* ``<student>.html`` (`testbed.grade.pages`) and ``index.html`` for the class.
"""

from __future__ import annotations

import csv
import io
import tempfile
from pathlib import Path

from testbed.core.errors import InputError, one_line
from testbed.core.safefiles import atomic_write_text
from testbed.grade.checks import StudentResult, run_checks
from testbed.grade.intake import Entry, Limits, entries, take_in
from testbed.grade.pages import class_page, student_figures, student_page
from testbed.grade.rubric import Assignment
from testbed.grade.verify import rebuild

GRADEBOOK_COLUMNS = ["student", "check", "expected", "measured", "points", "feedback"]


def grade_folder(found: Path, workspace: Path, assignment: Assignment, student: str,
                 figures: bool = True) -> StudentResult:
    """Grade a taken-in submission (found) using workspace for the re-analysed runs."""
    result = StudentResult(student)
    try:
        result.verification = rebuild(found, workspace, assignment)
        if not result.verification.runs:
            raise InputError("no result bundles (no <run-id>/metadata.json) in the submission")
        result.results = run_checks(assignment, workspace)
    except InputError as exc:
        result.error = one_line(exc)
        result.results = []
        return result
    if figures:
        result.figures = student_figures(workspace, result.results)
    return result


def grade_entry(entry: Entry, assignment: Assignment, limits: Limits = Limits(),
                figures: bool = True) -> StudentResult:
    """Take in, re-analyse and check one student's submission (in a temporary folder)."""
    with tempfile.TemporaryDirectory(prefix="testbed-grade-") as tmp:
        try:
            found = take_in(entry, Path(tmp) / "in", limits)
        except (InputError, OSError) as exc:
            result = StudentResult(entry.student,
                                   error=f"submission refused: {one_line(exc)}")
        else:
            result = grade_folder(found, Path(tmp) / "runs", assignment, entry.student,
                                  figures)
        if result.error:  # the private folder is gone: name the submission instead
            result.error = (result.error.replace(f"{Path(tmp) / 'in'}", entry.path.name)
                            .replace(f"{Path(tmp) / 'runs'}", f"{entry.path.name} (re-analysed)")
                            .replace(tmp, entry.path.name))
        return result


def check_out(out: Path, submissions: Path) -> None:
    """Refuse an --out folder that is the submissions folder or inside it, or that already
    holds something (an earlier gradebook)."""
    target, src = Path(out).resolve(), Path(submissions).resolve()
    if target == src or src in target.parents:
        raise InputError(f"--out {out}: inside the submissions folder {submissions}; grading "
                         "never writes into the submissions: choose another folder")
    if Path(out).exists() and not Path(out).is_dir():
        raise InputError(f"--out {out}: not a folder")
    if Path(out).is_dir() and any(Path(out).iterdir()):
        # another class's pages would stay beside this one's, its gradebook be replaced
        held = "a gradebook" if (Path(out) / "gradebook.csv").exists() else "files"
        raise InputError(f"--out {out}: already holds {held}; grading never writes over "
                         "earlier results: give a new folder")


def gradebook_rows(assignment: Assignment, students: list[StudentResult]) -> list[list[str]]:
    """The rows of gradebook.csv (see the module docstring), header excepted."""
    rows = []
    for s in students:
        for r in s.results:
            rows.append([s.student, r.check.name, r.check.expected_text(), r.measured_text(),
                         f"{r.points:g}", r.feedback])
        if s.verification is not None:
            rows.append([s.student, "verification", "", "", "", s.verification.summary()])
        if s.error:
            rows.append([s.student, "error", "", "", "0", s.error])
        rows.append([s.student, "total", f"{assignment.max_points:g}", "", f"{s.points:g}",
                     ""])
    return rows


def _csv(header: list[str], rows: list[list[str]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def grade_class(submissions: Path, assignment: Assignment, out: Path,
                limits: Limits = Limits(), jobs: int = 1) -> list[StudentResult]:
    """Grade every student of submissions into out (see the module docstring).

    jobs: students graded at once, each in its own process (the analysis is CPU-bound).
    """
    check_out(out, submissions)
    todo = entries(submissions)
    if jobs > 1 and len(todo) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=min(jobs, len(todo))) as pool:
            students = list(pool.map(grade_entry, todo, [assignment] * len(todo),
                                     [limits] * len(todo)))
    else:
        students = [grade_entry(e, assignment, limits) for e in todo]
    if not students:
        raise InputError(f"{submissions}: no submissions (no folder or archive in it)")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "gradebook.csv",
                      _csv(GRADEBOOK_COLUMNS, gradebook_rows(assignment, students)))
    atomic_write_text(out / "totals.csv", _csv(
        ["student", "points", "max_points", "verified", "error"],
        [[s.student, f"{s.points:g}", f"{assignment.max_points:g}", s.verified,
          s.error or ""] for s in students]))
    for s in students:
        atomic_write_text(out / f"{s.student}.html", student_page(assignment, s))
    atomic_write_text(out / "index.html", class_page(assignment, students))
    return students
