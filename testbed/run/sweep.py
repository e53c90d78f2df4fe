"""A sweep: run every plan of an output folder whose bundle is not complete.

`run_sweep` resumes (a complete bundle is skipped, an unfinished one moved aside and
redone), records a failed run and goes on, and marks the current run ``interrupted`` on
Ctrl-C or SIGTERM; when the sweep ends or is interrupted it rewrites
``summary.parquet``.  How the runs are carried out is an `Executor`'s job: `LocalExecutor`
runs them one after the other here (`run_one`); `testbed.run.cluster.executor.RayExecutor`
spreads them over a Ray cluster and installs the bundles its nodes send back.  The
bookkeeping (which runs are due, the lock, the report, the summary) is the same.
`finish_deferred` does on the host the analysis of runs made inside the testbed VM.
What a bundle is and when it counts as complete: `testbed.results.bundle`.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from testbed.core import safefiles
from testbed.core.errors import MissingFeatureError, RunError, TestbedError
from testbed.core.safefiles import atomic_write_text
from testbed.results.bundle import (
    ALWAYS_REQUIRED,
    COMPLETE,
    DEFERRED,
    FAILED,
    INTERRUPTED,
    RUNNING,
    SHA256_MANIFEST,
    Bundle,
    bundles,
    locked,
    move_aside,
)
from testbed.results.summary import fidelity_line, take_analysis, write_summary
from testbed.run.diskspace import DiskSpaceError


def now_iso(t: float | None = None) -> str:
    """A UTC ISO-8601 timestamp (seconds precision) for metadata."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if t is None else t))


class Progress(Protocol):
    """What the sweep loop reports to (a progress bar, plain lines, or nothing)."""

    def start(self, total: int, skipped: int) -> None: ...
    def begin(self, index: int, run_id: str) -> None: ...
    def phase(self, text: str) -> None: ...
    def end(self, run_id: str, status: str, wall_s: float, error: str | None) -> None: ...
    def close(self) -> None: ...


class NoProgress:
    """A `Progress` that reports nothing."""

    def start(self, total: int, skipped: int) -> None:
        pass

    def begin(self, index: int, run_id: str) -> None:
        pass

    def phase(self, text: str) -> None:
        pass

    def end(self, run_id: str, status: str, wall_s: float, error: str | None) -> None:
        pass

    def close(self) -> None:
        pass


class PlanLike(Protocol):
    """The parts of `testbed.spec.sweep.RunPlan` the sweep loop uses."""

    run_id: str
    repetition: int
    seed: int
    params: dict[str, Any]

    def resolved_toml(self) -> str: ...


# execute(plan, bundle, meta, phase) runs one experiment into bundle, adds what it learns
# to meta (versions, sysctls, ...), calls phase("...") as it goes, and returns the
# headline metrics. It must clean up after itself before returning or raising.
Execute = Callable[[Any, Bundle, dict[str, Any], Callable[[str], None]], "dict[str, Any] | None"]


@dataclass
class SweepReport:
    """What a sweep did: counts, and the failed runs with their errors."""

    out: Path
    total: int = 0
    skipped: int = 0
    complete: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    interrupted: str | None = None


@dataclass
class RunOutcome:
    """How one run ended: its status, one-line error, wall seconds, the exception that
    ended it (None when complete), when it ran elsewhere, the node (a short label), and
    whether this run wrote its bundle (False: a cluster run given up with no bundle;
    whatever ``out/<run id>`` holds then is from an earlier attempt)."""

    status: str
    error: str | None
    wall_s: float
    exc: Exception | None = None
    node: str | None = None
    bundle: bool = True


class Executor(ABC):
    """How the due runs of a sweep are carried out; `run_sweep` does the bookkeeping."""

    current: str | None = None  # the run under way (the one an interruption marks)

    @abstractmethod
    def runs(self, todo: list[Any], out: Path, progress: Progress,
             extra_meta: dict[str, Any]) -> Iterator[tuple[Any, RunOutcome]]:
        """Carry out todo (`RunPlan`s whose bundle is not complete) into out; yield each
        plan with its `RunOutcome` once its bundle is in ``out/<run id>`` (or, for a run
        that left none, once it is given up).  Closing the iterator stops what is still
        running.  An `InputError` raised here stops the sweep (a spec error)."""


class LocalExecutor(Executor):
    """Every run here, one after the other (`run_one`).

    execute: runs one plan (see `Execute`); recover: see `run_sweep`.
    """

    def __init__(self, execute: Execute, recover: Callable[[Bundle], Any] | None = None):
        self.execute = execute
        self.recover = recover

    def runs(self, todo: list[Any], out: Path, progress: Progress,
             extra_meta: dict[str, Any]) -> Iterator[tuple[Any, RunOutcome]]:
        for plan in todo:
            self.current = plan.run_id
            progress.begin(getattr(plan, "index", 0), plan.run_id)
            yield plan, run_one(plan, out, self.execute, progress, extra_meta, self.recover)


def run_sweep(plans: list[Any], out: Path, execute: Execute | Executor, *,
              fail_fast: bool = False, progress: Progress | None = None,
              extra_meta: dict[str, Any] | None = None,
              recover: Callable[[Bundle], Any] | None = None) -> SweepReport:
    """Run every plan whose bundle is not complete; keep going past failures.

    plans: `RunPlan`s in order; out: the output DIR; execute: runs one plan here (see
    `Execute`), or an `Executor` that carries out the runs (e.g. on a Ray cluster);
    fail_fast: stop (re-raising) at the first failed run; progress: where to report;
    extra_meta: added to every metadata.json (e.g. the command line); recover: called
    with a bundle left ``running`` by a process that died, before it is redone (to
    remove what that run's network left behind).
    A KeyboardInterrupt marks the current run ``interrupted``, updates the summary and is
    re-raised. A `MissingFeatureError` or a `DiskSpaceError` stops the sweep (every later run would
    fail too).
    """
    progress = progress or NoProgress()
    out = Path(out)
    executor = execute if isinstance(execute, Executor) else LocalExecutor(execute, recover)
    report = SweepReport(out=out, total=len(plans))
    with locked(out):
        todo = [p for p in plans if not Bundle(out / p.run_id).is_complete()]
        report.skipped = len(plans) - len(todo)
        progress.start(len(plans), report.skipped)
        try:
            with contextlib.closing(executor.runs(todo, out, progress,
                                                  extra_meta or {})) as runs:
                for plan, res in runs:
                    _account(report, plan, res, out, progress)
                    if res.exc is not None and (fail_fast or isinstance(
                            res.exc, (MissingFeatureError, DiskSpaceError))):
                        raise res.exc
        except (KeyboardInterrupt, SystemExit):
            report.interrupted = executor.current
            raise
        finally:
            progress.close()
            write_summary(out)
    return report


def _account(report: SweepReport, plan: Any, res: RunOutcome, out: Path,
             progress: Progress) -> None:
    """Report one ended run (its line, its fidelity verdict) and count it."""
    progress.end(plan.run_id, res.status, res.wall_s, res.error)
    note = getattr(progress, "note", None)
    line = fidelity_line(Bundle(out / plan.run_id).read_metadata() or {}) if res.bundle \
        else ""
    if note is not None and line:
        note(line + (f" (on {res.node})" if res.node else ""))
    if res.status == COMPLETE:
        report.complete += 1
    else:
        report.failed.append((plan.run_id, res.error or res.status))


def run_one(plan: Any, out: Path, execute: Execute, progress: Progress,
            extra_meta: dict[str, Any], recover: Callable[[Bundle], Any] | None = None
            ) -> RunOutcome:
    """Run one plan into a fresh bundle ``out/<run id>``, here; return how it ended.

    An unfinished bundle already there is moved aside first (after recover, when it is
    still ``running``).  A KeyboardInterrupt marks the bundle ``interrupted`` and is
    re-raised; any other exception makes it ``failed`` (`RunOutcome.exc`).
    """
    status, error, wall, exc = _one_run(plan, out, execute, progress, extra_meta, recover)
    return RunOutcome(status, error, wall, exc)


def _one_run(plan: Any, out: Path, execute: Execute, progress: Progress,
             extra_meta: dict[str, Any], recover: Callable[[Bundle], Any] | None = None
             ) -> tuple[str, str | None, float, Exception | None]:
    """Run one plan into a fresh bundle; return (status, error, wall seconds, exception)."""
    bundle = Bundle(out / plan.run_id)
    t_start = time.time()
    meta: dict[str, Any] = {
        "run_id": plan.run_id, "name": plan.spec.name, "status": RUNNING,
        "repetition": plan.repetition, "seed": plan.seed, "params": dict(plan.params),
        "started": now_iso(t_start), "t_started": t_start, **extra_meta,
    }
    fresh = False  # only a bundle made here may be marked (an old attempt stays as it is)
    try:
        if bundle.root.exists():
            if recover is not None and bundle.status() == RUNNING:
                recovered = recover(bundle)
                if recovered:  # what the killed attempt left, removed before this one
                    meta["recovered"] = recovered
            move_aside(out, bundle)
        bundle.create()
        fresh = True
        atomic_write_text(bundle.spec_path, plan.resolved_toml())
        bundle.write_metadata(meta)
        headline = execute(plan, bundle, meta, progress.phase)
    except (KeyboardInterrupt, SystemExit):
        if fresh:
            _finish(bundle, meta, INTERRUPTED,
                    "interrupted (Ctrl-C or SIGTERM); cleanup finished", t_start)
        raise
    except Exception as exc:
        if not fresh:
            raise
        error = str(exc) if isinstance(exc, TestbedError) else f"{type(exc).__name__}: {exc}"
        _finish(bundle, meta, FAILED, error, t_start, exc)
        return FAILED, error, time.time() - t_start, exc
    take_analysis(meta, headline)
    missing = bundle.missing(bundle.required(meta))
    if missing:
        error = "the bundle is incomplete: missing " + ", ".join(missing)
        _finish(bundle, meta, FAILED, error, t_start)
        return FAILED, error, time.time() - t_start, RunError(f"{plan.run_id}: {error}")
    _finish(bundle, meta, COMPLETE, None, t_start)
    return COMPLETE, None, time.time() - t_start, None


def _finish(bundle: Bundle, meta: dict[str, Any], status: str, error: str | None,
            t_start: float, exc: BaseException | None = None) -> None:
    t_end = time.time()
    if exc is not None:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        with contextlib.suppress(OSError):
            bundle.logs_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(bundle.logs_dir / "error.log", tb)
    meta.update(status=status, error=error, ended=now_iso(t_end), t_ended=t_end,
                wall_s=round(t_end - t_start, 3))
    try:  # what the run recorded, by sha256 (`testbed verify`, ``sha256sum -c``)
        meta["sha256_manifest"] = {"file": SHA256_MANIFEST,
                                   "files": bundle.write_sha256_manifest()}
    except OSError as exc:  # never at the cost of the metadata below
        meta["sha256_manifest"] = {"error": str(exc)}
    meta["files"] = bundle.manifest()
    bundle.write_metadata(meta)


# ---------------------------------------------------------------------------------------
# analysis deferred to the host (runs done inside the testbed VM)


def pending_analysis(out: Path) -> list[Bundle]:
    """The complete bundles of DIR whose analysis was deferred (see `DEFERRED`)."""
    return [b for b in bundles(out)
            if (b.read_metadata() or {}).get("analysis") == DEFERRED and b.is_complete()]


def finish_deferred(out: Path, analyze: Callable[[Path], dict[str, Any]],
                    progress: Callable[[str], None] | None = None) -> list[tuple[str, str]]:
    """Analyse every run of DIR whose analysis was deferred; return [(run id, error)].

    analyze: computes a bundle's ``metrics/`` and returns its headline metrics
    (`testbed.run.execute.analyze_run`); progress: called with a line per run.
    Each bundle is finished on its own (metrics, then its metadata: headline,
    ``analysis = "host"``, ``timing.analysis``, a new manifest), so an interruption leaves
    the rest pending for the next call.  A run whose capture cannot be analysed becomes
    ``failed`` with the reason, as it would have inside the VM.  The summary is rewritten.
    """
    out = Path(out)
    failed: list[tuple[str, str]] = []
    todo = pending_analysis(out)
    if not todo:
        return failed
    with locked(out):
        for i, bundle in enumerate(todo, 1):
            meta = bundle.read_metadata() or {}
            if progress is not None:
                progress(f"analysis {i}/{len(todo)}: {bundle.run_id}")
            t = time.time()
            try:
                headline = analyze(bundle.root)
            except Exception as exc:
                error = "analysis: " + (str(exc) if isinstance(exc, TestbedError)
                                        else f"{type(exc).__name__}: {exc}")
                if safefiles.check(bundle.root, bundle.logs_dir, "dir") in (None, "missing"):
                    with contextlib.suppress(OSError):  # never through a linked logs/
                        bundle.logs_dir.mkdir(parents=True, exist_ok=True)
                        atomic_write_text(bundle.logs_dir / "error.log", "".join(
                            traceback.format_exception(type(exc), exc, exc.__traceback__)))
                meta.update(status=FAILED, error=error)
                failed.append((bundle.run_id, error))
            else:
                take_analysis(meta, headline)
                meta["analysis"] = "host"
                line = fidelity_line(meta)
                if progress is not None and line:
                    progress(f"{bundle.run_id}:{line}")
                missing = bundle.missing(ALWAYS_REQUIRED)
                if missing:
                    error = "the bundle is incomplete: missing " + ", ".join(missing)
                    meta.update(status=FAILED, error=error)
                    failed.append((bundle.run_id, error))
            meta.setdefault("timing", {})["analysis"] = round(time.time() - t, 3)
            meta["files"] = bundle.manifest()
            bundle.write_metadata(meta)
        write_summary(out)
    return failed
