"""Result bundles: atomic files, run status, resume, and ``summary.parquet``.

Layout of an output directory (see ``docs/results.md``)::

    DIR/
      summary.parquet            one row per run (rewritten atomically after every run)
      <run-id>/                  one bundle per run
        spec.toml  metadata.json  transcript.jsonl  commands.sh
        pcap/  logs/  samples/  metrics/
      _attempts/<run-id>/<n>-<status>/   earlier unfinished attempts, moved aside, never deleted

A bundle's ``metadata.json`` is its commit record. It is written (atomically) with
``status = "running"`` when the run starts and rewritten once at the end with the final
status (``complete`` / ``failed`` / ``interrupted``) and a manifest of every file in the
bundle with its size. A bundle is complete only when its status says so *and* every
manifest file is present with that size; anything else is redone by the next
``testbed run`` into the same DIR, after the old attempt has been moved to ``_attempts``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from testbed.core import safefiles
from testbed.core.errors import InputError, MissingFeatureError, RunError, TestbedError
from testbed.core.safefiles import atomic_write_bytes, atomic_write_json, atomic_write_text

RUNNING = "running"
COMPLETE = "complete"
FAILED = "failed"
INTERRUPTED = "interrupted"
STATUSES = (RUNNING, COMPLETE, FAILED, INTERRUPTED)  # what metadata.json may record
# what Bundle.status() may also say of a bundle found in DIR (documented in docs/bundle.md):
BROKEN = "broken"  # metadata.json is not valid, or a "complete" run lost or changed a file
UNREADABLE = "unreadable"  # this user may not read the bundle (e.g. made with sudo)
RUN_STATUSES = (*STATUSES, BROKEN, UNREADABLE)

METRIC_TABLES = ("flows", "timeseries", "cwnd", "ping", "events")
RUN_REQUIRED = ("spec.toml", "transcript.jsonl")
ALWAYS_REQUIRED = (*RUN_REQUIRED, *(f"metrics/{t}.parquet" for t in METRIC_TABLES))
# metadata["analysis"]: where the analysis ran.  "deferred": the run finished (inside the
# testbed VM) and its analysis is still to be done by `finish_deferred` on the host, which
# then says "host".  Without the key, the run analysed itself.
DEFERRED = "deferred"
SUMMARY = "summary.parquet"
ATTEMPTS = "_attempts"
LOCK = ".testbed-run.lock"


# ---------------------------------------------------------------------------------------
# one bundle


class Bundle:
    """The folder of one run: paths of its parts and its status.

    root: ``DIR/<run-id>``.
    """

    def __init__(self, root: Path):
        self.root = Path(root)

    @property
    def run_id(self) -> str:
        return self.root.name

    @property
    def spec_path(self) -> Path:
        return self.root / "spec.toml"

    @property
    def metadata_path(self) -> Path:
        return self.root / "metadata.json"

    @property
    def transcript_path(self) -> Path:
        return self.root / "transcript.jsonl"

    @property
    def pcap_dir(self) -> Path:
        return self.root / "pcap"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def samples_dir(self) -> Path:
        return self.root / "samples"

    @property
    def metrics_dir(self) -> Path:
        return self.root / "metrics"

    def create(self) -> None:
        """Make the bundle folder and its sub-folders."""
        for d in (self.root, self.pcap_dir, self.logs_dir, self.samples_dir, self.metrics_dir):
            d.mkdir(parents=True, exist_ok=True)

    def read_metadata(self) -> dict[str, Any] | None:
        """metadata.json as a dict, or None when missing or unreadable."""
        return self.load_metadata()[0]

    def load_metadata(self) -> tuple[dict[str, Any] | None, str | None]:
        """(metadata.json as a dict, None), or (None, why not): ``permission denied``,
        ``no such file``, ``a symbolic link (not followed)``, ``not a regular file``,
        ``not valid JSON`` ...

        metadata.json is never followed when it is a symbolic link, nor opened when it is
        a FIFO or device (`testbed.core.safefiles`).
        """
        why = safefiles.check(self.root, self.metadata_path)
        if why == "missing":
            return None, "no such file"
        if why is not None and not why.startswith("unreadable"):
            return None, why  # a link, a FIFO, a folder: never followed nor opened
        try:
            text = safefiles.read_text(self.metadata_path)
        except PermissionError:
            return None, "permission denied"
        except FileNotFoundError:
            return None, "no such file"
        except safefiles.UnsafeFileError:
            return None, "not a regular file"  # swapped after the check above
        except OSError as exc:
            return None, exc.strerror or type(exc).__name__
        try:
            meta = json.loads(text)
        except ValueError:
            return None, "not valid JSON"
        except RecursionError:
            return None, "not valid JSON (nested too deeply)"
        return (meta, None) if isinstance(meta, dict) else (None, "not a JSON object")

    def write_metadata(self, meta: dict[str, Any]) -> None:
        """Replace metadata.json atomically."""
        atomic_write_json(self.metadata_path, meta)

    def manifest(self) -> dict[str, int]:
        """Every file in the bundle (relative path -> size), metadata.json excepted."""
        out: dict[str, int] = {}
        for path in sorted(self.root.rglob("*")):
            if path.is_file() and path != self.metadata_path and not path.name.endswith(".tmp"):
                out[path.relative_to(self.root).as_posix()] = path.stat().st_size
        return out

    def missing(self, required: tuple[str, ...] | list[str] = ALWAYS_REQUIRED) -> list[str]:
        """The required files that are not in the bundle."""
        return [r for r in required if not (self.root / r).is_file()]

    @staticmethod
    def required(meta: dict[str, Any]) -> tuple[str, ...]:
        """The files a finished run must have: no metrics/ while its analysis is deferred."""
        return RUN_REQUIRED if meta.get("analysis") == DEFERRED else ALWAYS_REQUIRED

    def status(self) -> str:
        """``missing``, or one of `RUN_STATUSES`: ``running``, ``complete``, ``failed``,
        ``interrupted``, ``broken``, ``unreadable``.

        ``complete`` is only returned when every file of the manifest is present with its
        recorded size; a bundle that claims completeness but is not is ``broken``, and so
        is one whose metadata.json is not valid; ``unreadable`` when this user may not
        read metadata.json.
        """
        if not self.root.exists():
            return "missing"
        meta, why = self.load_metadata()
        if meta is None:
            return UNREADABLE if why == "permission denied" else BROKEN
        status = meta.get("status")
        if status == COMPLETE:
            try:
                return COMPLETE if self._all_files_in_place(meta) else BROKEN
            except PermissionError:
                return UNREADABLE
        return status if status in STATUSES else BROKEN

    def _all_files_in_place(self, meta: dict[str, Any]) -> bool:
        files = meta.get("files")
        if not isinstance(files, dict) or self.missing(self.required(meta)):
            return False
        for rel, size in files.items():
            p = self.root / rel
            if not p.is_file() or p.stat().st_size != size:
                return False
        return True

    def is_complete(self) -> bool:
        """True when the run finished and everything it wrote is in place."""
        return self.status() == COMPLETE


def move_aside(out: Path, bundle: Bundle) -> Path:
    """Move an unfinished bundle to ``DIR/_attempts/<run-id>/<n>-<status>/``; return it."""
    status = bundle.status()
    base = Path(out) / ATTEMPTS / bundle.run_id
    base.mkdir(parents=True, exist_ok=True)
    n = 1 + max((int(p.name.split("-", 1)[0]) for p in base.iterdir()
                 if p.name.split("-", 1)[0].isdigit()), default=0)
    dest = base / f"{n}-{status}"
    shutil.move(str(bundle.root), str(dest))
    return dest


def open_lock_file(path: Path) -> int:
    """Open (creating it if absent) the lock file of an output folder; return the fd.

    Never follows a symbolic link (``O_NOFOLLOW``; a new file is made with
    ``O_CREAT | O_EXCL``), and an existing file must be a regular file owned by us with one
    link, so a planted ``.testbed-run.lock -> /etc/shadow`` (or a hard link to it) is
    refused with `InputError` instead of being truncated as root.
    """
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        try:
            fd = os.open(path, flags | os.O_NONBLOCK)
        except OSError:
            raise InputError(f"{path}: not a regular file (a symbolic link?); the lock "
                             "file is never followed; remove it and run again") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
        os.close(fd)
        raise InputError(f"{path}: not a regular file owned by this user with a single "
                         "link; remove it and run again")
    return fd


@contextlib.contextmanager
def locked(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on DIR so that two sweeps never write into it at once.

    Only commands that write into DIR take it (run, study, and report when it finishes
    a deferred analysis); see `open_lock_file` for how the file is opened.
    """
    import fcntl

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK
    fd = open_lock_file(path)
    f = os.fdopen(fd, "r+")
    try:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read(32).strip() or "?"
            raise InputError(f"{out}: another `testbed run` (pid {holder!r}) is writing here; "
                             "wait for it or use another --out") from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        yield
    finally:
        f.close()


# ---------------------------------------------------------------------------------------
# the runs table and summary.parquet


def bundles(out: Path) -> list[Bundle]:
    """Every bundle directly under DIR (folders with a metadata.json), sorted by name.

    A folder that is a symbolic link, or whose metadata.json is one, is not a bundle."""
    out = Path(out)
    if not out.is_dir():
        return []
    return [Bundle(p) for p in sorted(out.iterdir())
            if not p.name.startswith(("_", ".")) and _has_metadata(out, p.name)]


def _has_metadata(out: Path, name: str) -> bool:
    """Whether out/name is a real folder (no symbolic link) holding a metadata.json that is
    a regular file (no link, FIFO ...); a folder this user may not enter counts (its status
    is then ``unreadable``)."""
    why = safefiles.check(out, out / name / "metadata.json")
    return why is None or why.startswith("unreadable")


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
FIDELITY_CHECKS = ("rate_ratio_min", "rtt_excess_ms_max", "first_rtt_ms", "event_late_ms_max",
                   "cpu_saturated_share", "cpu_busiest_mean", "emulator_ooo_ratio_max",
                   "softnet_dropped", "ovs_upcalls_lost", "controller_restarts")
FIDELITY_COLUMNS = ("fidelity", "fidelity_reasons", *(f"fidelity_{k}" for k in FIDELITY_CHECKS))
# the columns a run's own record sets; a swept key of the same name gets ``param:<key>``
PROTECTED_COLUMNS = (*IDENTITY_COLUMNS, *FIDELITY_COLUMNS)


def param_column(key: str, taken: set[str] | tuple[str, ...] = PROTECTED_COLUMNS) -> str:
    """The summary column of swept key: the key itself (``transport.cc``), or
    ``param:<key>`` when that name is an identity column (``seed``, ``status``, ...), a
    fidelity column (``fidelity``, ``fidelity_*``) or a phase-time column (``*_s`` without
    a dot), so no parameter replaces them."""
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
    row: dict[str, Any] = {
        "run_id": bundle.run_id,
        "name": meta.get("name"),
        "status": bundle.status(),
        "repetition": meta.get("repetition"),
        "seed": meta.get("seed"),
        "started": meta.get("started"),
        "ended": meta.get("ended"),
        "wall_s": meta.get("wall_s"),
        "error": meta.get("error"),
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


def runs_frame(out: Path):
    """The runs table (a pandas DataFrame) built from every bundle's metadata.json."""
    import pandas as pd

    rows = [run_row(b) for b in bundles(out)]
    df = pd.DataFrame(rows, columns=None if rows else list(IDENTITY_COLUMNS))
    for col in df.columns:
        df[col] = _uniform(df[col])
    return df


def _uniform(col):
    """Make a column storable in parquet: one scalar type, else JSON text."""
    values = [v for v in col if v is not None and v == v]
    kinds = {type(v) for v in values}
    if kinds == {int, float}:
        return col.astype("float64")
    if len(kinds) <= 1 and not kinds & {list, dict}:
        return col
    return col.map(lambda v: None if v is None else
                   (v if isinstance(v, str) else json.dumps(v, sort_keys=True)))


def write_summary(out: Path) -> Path:
    """Rewrite ``DIR/summary.parquet`` (atomically) from the bundles; return its path."""
    import io

    df = runs_frame(out)
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    path = Path(out) / SUMMARY
    atomic_write_bytes(path, buf.getvalue())
    return path


def now_iso(t: float | None = None) -> str:
    """A UTC ISO-8601 timestamp (seconds precision) for metadata."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if t is None else t))


# ---------------------------------------------------------------------------------------
# a sweep: resume, failures, interruption


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


def run_sweep(plans: list[Any], out: Path, execute: Execute, *, fail_fast: bool = False,
              progress: Progress | None = None, extra_meta: dict[str, Any] | None = None,
              recover: Callable[[Bundle], Any] | None = None) -> SweepReport:
    """Run every plan whose bundle is not complete; keep going past failures.

    plans: `RunPlan`s in order; out: the output DIR; execute: runs one plan (see `Execute`);
    fail_fast: stop (re-raising) at the first failed run; progress: where to report;
    extra_meta: added to every metadata.json (e.g. the command line); recover: called
    with a bundle left ``running`` by a process that died, before it is redone (to
    remove what that run's network left behind).
    A KeyboardInterrupt marks the current run ``interrupted``, updates the summary and is
    re-raised. A `MissingFeatureError` stops the sweep (every later run would fail too).
    """
    progress = progress or NoProgress()
    out = Path(out)
    report = SweepReport(out=out, total=len(plans))
    with locked(out):
        todo = [(i, p) for i, p in enumerate(plans)
                if not Bundle(out / p.run_id).is_complete()]
        report.skipped = len(plans) - len(todo)
        progress.start(len(plans), report.skipped)
        current: str | None = None
        try:
            for index, plan in todo:
                current = plan.run_id
                progress.begin(index, plan.run_id)
                status, error, wall, exc = _one_run(plan, out, execute, progress,
                                                    extra_meta or {}, recover)
                progress.end(plan.run_id, status, wall, error)
                note = getattr(progress, "note", None)
                line = fidelity_line(Bundle(out / plan.run_id).read_metadata() or {})
                if note is not None and line:
                    note(line)
                if status == COMPLETE:
                    report.complete += 1
                    continue
                report.failed.append((plan.run_id, error or status))
                if exc is not None and (fail_fast or isinstance(exc, MissingFeatureError)):
                    raise exc
        except (KeyboardInterrupt, SystemExit):
            report.interrupted = current
            raise
        finally:
            progress.close()
            write_summary(out)
    return report


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
                recover(bundle)
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
