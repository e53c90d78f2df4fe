"""``testbed check``, ``grade`` and ``verify`` (docs/assignments.md): `register(app)` adds
them to the typer app."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from testbed.cli.common import guarded, hand_over_on_exit
from testbed.core.errors import InputError, TestbedError

if TYPE_CHECKING:
    from testbed.grade.verify import RunCheck

_ASSIGNMENT = typer.Option("--assignment", "-a", metavar="NAME",
                           help="An assignment of experiments/assignments, or its folder.")


def _taken_in(path: Path, tmp: Path, prefix: str = "") -> Path:
    """path copied (or extracted) into tmp/in/<prefix><its name>; returns that folder."""
    from testbed.grade.intake import Entry, IntakeError, take_in

    # under its own name: a single bundle given is found as itself, and its folder's name
    # is the run id every line is about
    name = Path(path).resolve().name
    for suffix in (".tar.gz", ".tgz", ".tar", ".zip"):  # an archive of one bundle
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            name = name[:-len(suffix)]
            break
    name = name or "in"
    try:
        return take_in(Entry("bundle", path), tmp / "in" / f"{prefix}{name}")
    except IntakeError as exc:  # named inside what was given: name what was given too
        text = str(exc)
        given = str(path)
        if text.startswith(f"{Path(path).name}:"):
            raise IntakeError(given + text[len(Path(path).name):]) from None
        raise IntakeError(f"{given}: {text}") from None


def _named_as_given(exc: TestbedError, copy: Path, given: Path) -> TestbedError:
    """exc with the private copy's path replaced by the one the user gave (a message
    naming /tmp/testbed-verify-.../in/... points at nothing the user has)."""
    text = str(exc).replace(str(copy), str(given))
    if text == str(exc):
        return exc
    try:
        return type(exc)(text)
    except TypeError:  # a class whose constructor takes more than a message
        return InputError(text)


def check_cmd(assignment: str, bundles: Sequence[Path]) -> int:
    """Print what would pass and fail; exit 0 when every check passes and the verification
    finds nothing (grading would mark the submission ``flagged``), else 1.  bundles: one
    or more results folders or bundles, checked together as one submission (an
    assignment's specs may have run into different folders)."""
    import tempfile

    from testbed.grade.gradebook import grade_folder
    from testbed.grade.rubric import load_assignment

    a = load_assignment(assignment)
    for bundle in bundles:
        if not Path(bundle).exists():
            raise InputError(f"{bundle}: no such folder; give the --out DIR of `testbed "
                             "run` (or a run's bundle)")
    with tempfile.TemporaryDirectory(prefix="testbed-check-") as tmp:
        if len(bundles) == 1:
            found = _taken_in(bundles[0], Path(tmp))
            copies = {found: bundles[0]}
        else:  # side by side, numbered (two given folders may share a name), one level
            # down: bundles nested as deep under each as under a single folder but one
            copies = {_taken_in(b, Path(tmp), f"{i}-"): b for i, b in enumerate(bundles)}
            found = Path(tmp) / "in"
        res = grade_folder(found, Path(tmp) / "runs", a, "you", figures=False)
    if res.error:
        error = res.error
        for copy, given in copies.items():
            error = error.replace(str(copy), str(given))
        raise InputError(error if len(bundles) > 1 else f"{bundles[0]}: {error}")
    for r in res.results:
        mark = "PASS" if r.passed else "FAIL"
        typer.echo(f"{mark} {r.check.name}: measured {r.measured_text() or 'nothing'}, "
                   f"expected {r.check.expected_text(reveal=False)}, "
                   f"{r.points:g}/{r.check.points:g} points: {r.feedback}")
    flagged = res.verification is not None and not res.verification.ok
    if res.verification is not None:
        typer.echo(f"verification: {res.verification.summary()}")
    typer.echo(f"total: {res.points:g} of {a.max_points:g} points")
    if flagged:
        given = " ".join(str(b) for b in bundles)
        typer.echo(f"grading would mark these results flagged for the instructor: "
                   f"`testbed verify --assignment {assignment} DIR` names what differs in "
                   f"each of {given}, and `testbed verify --update DIR` analyses runs again "
                   "whose stored metrics an older analysis made")
    return 0 if all(r.passed for r in res.results) and not flagged else 1


def verify_cmd(bundle: Path, assignment: str | None, update: bool = False) -> int:
    """Re-analyse and compare; exit 0 when everything matches, else 1.  update: analyse
    again in place the runs whose stored metrics differ (`testbed.run.reanalyse`); exit 0
    when that leaves nothing flagged."""
    import tempfile

    from testbed.grade.rubric import load_assignment
    from testbed.grade.verify import rebuild

    a = load_assignment(assignment) if assignment else None
    if not Path(bundle).exists():
        raise InputError(f"{bundle}: no such folder; give a run's bundle or a results folder")
    if update and not Path(bundle).is_dir():
        raise InputError(f"{bundle}: --update writes into a folder; give the folder (a run's "
                         "bundle or a results folder), not an archive")
    with tempfile.TemporaryDirectory(prefix="testbed-verify-") as tmp:
        found = _taken_in(bundle, Path(tmp))
        try:
            ver = rebuild(found, Path(tmp) / "runs", a)
        except TestbedError as exc:
            raise _named_as_given(exc, found, bundle) from None
    for run in ver.runs:
        lines = run.lines()
        typer.echo(f"{run.run_id}: ok" if not lines else "\n".join(lines))
    if not ver.runs:
        raise InputError(f"{bundle}: no result bundles (no <run-id>/metadata.json) here")
    if not update:
        return 0 if ver.ok else 1
    return _update(Path(bundle).absolute(), found, ver.runs)  # `.`: its folder is ..


def _update(given: Path, found: Path, runs: list[RunCheck]) -> int:
    """`verify --update`: the stale runs of given analysed again where they are."""
    from testbed.core import safefiles
    from testbed.run.execute import analyze_run
    from testbed.run.reanalyse import reanalyse

    todo, refused = [], []
    for run in runs:
        if not run.differs:
            continue
        target = given / Path(run.source).relative_to(found)
        why = safefiles.check(given, target, "dir") if target != given else None
        if why is not None:
            refused.append(f"{run.run_id}: not updated: {target} is {why}")
        else:
            todo.append((target, run.differs))
    done = reanalyse(todo, analyze_run)
    for line in refused + [line for line, _ok in done]:
        typer.echo(line)
    left = [r for r in runs if r.manifest or r.spec_problems] + refused \
        + [line for line, ok in done if not ok]
    typer.echo(f"updated {sum(ok for _line, ok in done)} of {len(runs)} run(s)")
    return 1 if left else 0


def register(app: typer.Typer) -> None:
    """Add check, grade and verify to app."""

    @app.command()
    def check(assignment: Annotated[str, _ASSIGNMENT],
              bundles: Annotated[list[Path], typer.Argument(
                  metavar="DIR", help="Your results folder (--out DIR of testbed run); "
                  "several when the assignment's specs ran into different folders.")]
              ) -> None:
        """Run an assignment's checks on your results before handing them in."""
        raise typer.Exit(guarded(lambda: check_cmd(assignment, bundles)))

    @app.command()
    def grade(ctx: typer.Context,
              submissions: Annotated[Path, typer.Argument(
                  metavar="SUBMISSIONS", help="A folder of per-student folders or archives "
                  "(zip, tar.gz).")],
              assignment: Annotated[str, _ASSIGNMENT],
              out: Annotated[Path, typer.Option("--out", "-o", metavar="DIR",
                                                help="Where the gradebook and pages go.")],
              max_mb: Annotated[int, typer.Option(
                  "--max-mb", metavar="N", min=1, help="Refuse a submission larger than N MB "
                  "once extracted.")] = 1024,
              max_files: Annotated[int, typer.Option(
                  "--max-files", metavar="N", min=1, help="Refuse a submission of more than N "
                  "files.")] = 5000,
              jobs: Annotated[int, typer.Option(
                  "--jobs", "-j", metavar="N", min=0,
                  help="Students graded at once (default: the number of CPUs).")] = 0
              ) -> None:
        """Grade a class: gradebook.csv, totals.csv, a feedback page per student, index.html."""
        from testbed.grade.gradebook import grade_class
        from testbed.grade.intake import Limits
        from testbed.grade.rubric import load_assignment

        hand_over_on_exit(ctx, out)

        def go() -> int:
            students = grade_class(submissions, load_assignment(assignment), out,
                                   Limits(max_bytes=max_mb << 20, max_files=max_files),
                                   jobs=jobs or os.cpu_count() or 1)
            for s in students:
                typer.echo(f"{s.student}: {s.points:g} points, {s.verified}"
                           + (f": {s.error}" if s.error else ""))
            typer.echo(f"{len(students)} students graded into {out / 'gradebook.csv'}")
            return 0

        raise typer.Exit(guarded(go))

    @app.command()
    def verify(ctx: typer.Context,
               bundle: Annotated[Path, typer.Argument(
                   metavar="BUNDLE", help="A run's bundle or a results folder.")],
               assignment: Annotated[str | None, typer.Option(
                   "--assignment", "-a", metavar="NAME",
                   help="Also check the specs against this assignment's fixed parts.")]
               = None,
               update: Annotated[bool, typer.Option(
                   "--update", help="Analyse again, in place, each run whose stored metrics "
                   "differ and whose files match its sha256 manifest (metrics/, its "
                   "headline, the folder's summary.parquet).")] = False) -> None:
        """Recompute the metrics from the captures and compare them with the stored ones."""
        if update:  # under sudo: what it writes is the user's, the sweep's lock too
            from testbed.results.bundle import LOCK

            mine = [bundle]
            if (bundle / "metadata.json").is_file():  # a run: its sweep's summary and lock
                mine += [bundle.parent / "summary.parquet", bundle.parent / LOCK]
            hand_over_on_exit(ctx, *mine)
        raise typer.Exit(guarded(lambda: verify_cmd(bundle, assignment, update)))
