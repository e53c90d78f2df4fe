"""Result bundles: the folder of one run, its status, and the lock of an output folder.

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

Every metadata.json says which version of this format it follows (``format_version``,
``"MAJOR.MINOR"``, `FORMAT_VERSION`; docs/bundle.md "Format version").  A reader refuses a
bundle whose major version is newer than the one it knows (`check_format`); a bundle
without the key was written before it existed and reads as ``1.0``.

The runs table and ``summary.parquet`` are built in `testbed.results.summary`; the sweep
that writes bundles (resume, failures, interruption) is `testbed.run.sweep`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from testbed.core import safefiles
from testbed.core.errors import InputError
from testbed.core.ownership import invoking_user
from testbed.core.safefiles import atomic_write_json

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
# testbed VM) and its analysis is still to be done on the host by
# `testbed.run.sweep.finish_deferred`, which then says "host".  Without the key, the run
# analysed itself.
DEFERRED = "deferred"
ATTEMPTS = "_attempts"
LOCK = ".testbed-run.lock"
SHA256_MANIFEST = "manifest.sha256"  # what the run recorded, by sha256 (`write_sha256_manifest`)
NOT_RECORDED_DIRS = ("metrics", "figures", ATTEMPTS)  # written again by analysis / reports
NOT_RECORDED_FILES = {"metadata.json", SHA256_MANIFEST, "report.html", LOCK}
MANIFEST_MAX_BYTES = 16 << 20
_MANIFEST_LINE = re.compile(r"([0-9a-fA-F]{64}) [ *](\S(?:.*\S)?)")
# metadata.json's format_version (docs/bundle.md "Format version"): the major number goes
# up when an older reader would misread the bundle (a file, key or column removed, renamed
# or changed in meaning or unit); the minor one when something is only added
FORMAT_VERSION = "1.10"  # 1.1: manifest.sha256; 1.2: coupled_cc, samples/cc-trace-*.jsonl;
# 1.3: handover, samples/handover-*.jsonl; 1.4: neighbours, handover t_seen, una_seen; 1.5:
# handover undone, undone_resent, undone lines; 1.6: node (Ray); 1.7: handover cwnd_redo;
# 1.8: cwnd's sample_s (and t the middle of the ss run), samplers' sample_s_*; 1.9: fct_s
# null on every row of a transfer run without a size; 1.10: fidelity_raw links' phases,
# throughput_bps of such a transfer while it sent
ASSUMED_VERSION = (1, 0)  # a bundle written before format_version existed
_MAJOR = int(FORMAT_VERSION.split(".")[0])


class BundleFormatError(InputError):
    """A bundle written by a newer testbed, in a format whose major version this one does
    not know."""


def format_version(meta: dict[str, Any]) -> tuple[int, int] | None:
    """(major, minor) of meta's ``format_version``; `ASSUMED_VERSION` when the key is
    absent; None when it is not a ``"MAJOR.MINOR"`` string."""
    value = meta.get("format_version")
    if value is None:
        return ASSUMED_VERSION
    m = re.fullmatch(r"(\d{1,6})\.(\d{1,6})", value) if isinstance(value, str) else None
    return (int(m.group(1)), int(m.group(2))) if m else None


def check_format(meta: dict[str, Any], where: Path) -> None:
    """Raise `BundleFormatError` (one line naming where, the version and the remedy)
    when meta was written in a format newer than this testbed reads.

    meta: a bundle's metadata.json; where: that file (for the message).  A malformed
    version is left to the caller (`format_version` gives None).
    """
    version = format_version(meta)
    if version is not None and version[0] > _MAJOR:
        raise BundleFormatError(
            f"{where}: bundle format {meta.get('format_version')} is newer than this testbed "
            f"reads ({_MAJOR}.x); upgrade the testbed (git pull, then sudo bash "
            "scripts/install) to read it")



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
        ``not valid JSON``, ``format_version ... is not MAJOR.MINOR`` ...

        metadata.json is never followed when it is a symbolic link, nor opened when it is
        a FIFO or device (`testbed.core.safefiles`).  Raises `BundleFormatError` for a
        bundle written in a newer major format version (`check_format`).
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
        if not isinstance(meta, dict):
            return None, "not a JSON object"
        if format_version(meta) is None:
            return None, f"format_version {meta.get('format_version')!r} is not MAJOR.MINOR"
        check_format(meta, self.metadata_path)
        return meta, None

    def write_metadata(self, meta: dict[str, Any]) -> None:
        """Replace metadata.json atomically, with this testbed's ``format_version`` first."""
        atomic_write_json(self.metadata_path, {
            "format_version": FORMAT_VERSION,
            **{k: v for k, v in meta.items() if k != "format_version"}})

    def recorded_files(self) -> list[str]:
        """What the run recorded (relative paths, sorted): every regular file but
        metadata.json, the sha256 manifest, and what analysis and reports write again
        (``metrics/``, ``figures/``, ``report.html``); links are neither listed nor
        followed."""
        out: list[str] = []
        for here, dirs, files in os.walk(self.root):
            rel = Path(here).relative_to(self.root)
            if rel == Path("."):
                dirs[:] = [d for d in dirs if d not in NOT_RECORDED_DIRS]
            dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(here, d)))
            for name in files:
                r = (rel / name).as_posix()
                if r in NOT_RECORDED_FILES or name.endswith(".tmp"):
                    continue
                if stat.S_ISREG(os.lstat(os.path.join(here, name)).st_mode):
                    out.append(r)
        return sorted(out)

    def write_sha256_manifest(self) -> int:
        """Write ``manifest.sha256`` (`SHA256_MANIFEST`): one ``<sha256>  <path>`` line per
        recorded file, as ``sha256sum`` prints and checks them (``cd BUNDLE && sha256sum
        -c manifest.sha256``); return how many files it lists.  A run writes it when it
        ends, so a capture or sample changed afterwards shows (`check_sha256_manifest`).
        It is a consistency check, not a signature: whoever changes a file can write
        the manifest again."""
        files = self.recorded_files()
        safefiles.atomic_write_text(self.root / SHA256_MANIFEST, "".join(
            f"{_sha256(self.root / r)}  {r}\n" for r in files))
        return len(files)

    def check_sha256_manifest(self) -> list[str]:
        """What does not match the bundle's ``manifest.sha256``: a listed file changed or
        missing, a recorded file it does not list, a line that is not ``<sha256>  <path>``
        inside the bundle; ["no manifest.sha256"] for a bundle without one (written by
        runs since format_version 1.1).  Nothing is followed outside the bundle."""
        path = safefiles.file_in(self.root, SHA256_MANIFEST)
        if path is None:
            return [f"no {SHA256_MANIFEST}"]
        problems: list[str] = []
        listed: set[str] = set()
        text = safefiles.read_bytes(path, MANIFEST_MAX_BYTES).decode("utf-8", "replace")
        for n, line in enumerate(text.splitlines(), 1):
            m = _MANIFEST_LINE.fullmatch(line)
            if m is None:
                problems.append(f"{SHA256_MANIFEST} line {n} is not '<sha256>  <path>'")
                continue
            digest, rel = m.group(1).lower(), m.group(2)
            listed.add(rel)
            why = safefiles.check(self.root, self.root / rel)
            if why is not None:
                problems.append(f"{rel}: {why}")
            elif _sha256(self.root / rel) != digest:
                problems.append(f"{rel}: changed since the run recorded it")
        problems += [f"{r}: not in {SHA256_MANIFEST}" for r in self.recorded_files()
                     if r not in listed]
        return problems

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
        read metadata.json.  `status_and_why` also says why.
        """
        return self.status_and_why()[0]

    def status_and_why(self) -> tuple[str, str | None]:
        """(`status`, why it is ``broken`` or ``unreadable`` in words, else None): e.g.
        ``metadata.json: not valid JSON ...`` or ``metrics/flows.parquet is 812 bytes, the
        run wrote 4096``."""
        if not self.root.exists():
            return "missing", None
        meta, why = self.load_metadata()
        if meta is None:
            return (UNREADABLE if why == "permission denied" else BROKEN), f"metadata.json: {why}"
        status = meta.get("status")
        if status == COMPLETE:
            try:
                problem = self.file_problem(meta)
            except PermissionError as exc:
                return UNREADABLE, f"{exc.filename}: permission denied"
            return (COMPLETE, None) if problem is None else (BROKEN, problem)
        if status in STATUSES:
            return status, None
        return BROKEN, f"metadata.json: status {str(status)[:40]!r} is none a run writes " \
                       f"({', '.join(STATUSES)})"

    def file_problem(self, meta: dict[str, Any], skip: str | None = None) -> str | None:
        """Why the files of a complete run are not in place, or None.

        skip: a folder prefix (``metrics/``) whose listed files are not looked at."""
        files = meta.get("files")
        if not isinstance(files, dict):
            return "metadata.json: no list of the run's files (\"files\")"
        lost = [r for r in self.missing(self.required(meta))
                if skip is None or not r.startswith(skip)]
        if lost:  # absent, or there as something else (a folder, a FIFO, a link)
            why = safefiles.check(self.root, self.root / lost[0]) or "missing"
            return f"{safefiles.linked_part(self.root, self.root / lost[0]) or lost[0]} is {why}"
        for rel, size in files.items():
            if skip is not None and str(rel).startswith(skip):
                continue
            p = self.root / rel
            # a file reached through a linked folder (metrics/ -> elsewhere) is not in place:
            # no reader follows the link, so the run would read as complete and empty
            why = safefiles.check(self.root, p)
            if why is not None:  # a linked metrics/ is named as the folder
                return f"{safefiles.linked_part(self.root, p) or rel} is {why}"
            have = p.stat().st_size
            if have != size:
                return f"{rel} is {have} bytes, the run wrote {size}"
        return None

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
    ``O_CREAT | O_EXCL``), and an existing file must be a regular file with one link, owned
    by us or, under sudo, by the user who ran sudo (`testbed.core.ownership` gave it to
    them).  So a planted ``.testbed-run.lock -> /etc/shadow`` (or a hard link to it) is
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
    user = invoking_user()
    owners = {os.geteuid(), *((user[0],) if user else ())}
    if not stat.S_ISREG(st.st_mode) or st.st_uid not in owners or st.st_nlink != 1:
        os.close(fd)
        raise InputError(f"{path}: not a regular file owned by this user with a single "
                         "link; remove it and run again")
    return fd


class FolderBusy(InputError):
    """`locked`: another command holds the folder's lock."""


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
            raise FolderBusy(f"{out}: another `testbed run` (pid {holder!r}) is writing here; "
                             "wait for it or use another --out") from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        yield
    finally:
        f.close()


def bundles(out: Path) -> list[Bundle]:
    """Every bundle directly under DIR (folders with a metadata.json), sorted by name.

    A folder that is a symbolic link, or whose metadata.json is one, is not a bundle."""
    out = Path(out)
    if not out.is_dir():
        return []
    return [Bundle(p) for p in sorted(out.iterdir())
            if not p.name.startswith(("_", ".")) and has_metadata(out, p.name)]


def has_metadata(out: Path, name: str) -> bool:
    """Whether out/name is a real folder (no symbolic link) holding a metadata.json that is
    a regular file (no link, FIFO ...); a folder this user may not enter counts (its status
    is then ``unreadable``)."""
    why = safefiles.check(out, out / name / "metadata.json")
    return why is None or why.startswith("unreadable")


def _sha256(path: Path) -> str:
    """Hex sha256 of a regular file, read without following a link."""
    import hashlib

    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise safefiles.UnsafeFileError(f"{path}: not a regular file")
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
