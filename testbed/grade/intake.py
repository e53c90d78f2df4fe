"""Submissions taken in safely: a folder of per-student folders or archives (zip, tar.gz).

Everything in a submission is untrusted.  `take_in(entry, dest, limits)` copies a student's
folder or extracts a student's archive into dest and refuses, with one line naming the
member and the reason (`IntakeError`):

* absolute paths, ``..`` components, empty or backslash-separated names;
* symbolic links, hard links, devices and FIFOs (in a folder too: nothing is followed);
* more than ``limits.max_files`` files or ``limits.max_bytes`` bytes in all, counted while
  copying (an archive's declared sizes are not trusted), or a path more than `MAX_DEPTH`
  folders deep;
* an encrypted or damaged member, and a member given twice or as a file and a folder.

Nothing is ever written into the submissions folder: dest must lie outside it.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from testbed.core.errors import InputError

ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")
_CHUNK = 1 << 20
MAX_DEPTH = 32  # folders a path may go down (a bundle's deepest file is 3 below its run)


class IntakeError(InputError):
    """A submission that cannot be taken in (unsafe member, malformed archive, too big)."""


@dataclass(frozen=True)
class Limits:
    """How much one submission may hold once extracted."""

    max_bytes: int = 1 << 30     # 1 GiB
    max_files: int = 5000


@dataclass(frozen=True)
class Entry:
    """One student's submission: their name and the folder or archive."""

    student: str
    path: Path


def student_name(path: Path) -> str:
    """A student's name from their folder or archive name (suffix dropped; only letters,
    digits, ``.``, ``-`` and ``_`` kept, so it is safe as a file name)."""
    name = path.name
    for suffix in ARCHIVE_SUFFIXES:
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
            break
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")[:80]
    return clean or "student"


def entries(submissions: Path) -> list[Entry]:
    """The students of a submissions folder: each sub-folder and archive, sorted by name.

    Raises `InputError` when the folder is missing; other files (and links) become entries
    too, so that `take_in` gives them their error row instead of dropping them silently.
    """
    submissions = Path(submissions)
    if not submissions.is_dir():
        raise InputError(f"{submissions}: no such folder; give a folder holding one folder "
                         "or archive (zip, tar.gz) per student")
    for own in ("metadata.json", "summary.parquet"):  # one run's or one sweep's results
        if (submissions / own).exists() or (submissions / own).is_symlink():
            raise InputError(f"{submissions}: a results folder (it holds {own}), not a "
                             "class's submissions; give the folder holding one folder or "
                             "archive per student, or check one student's results with "
                             "`testbed check`")
    out: list[Entry] = []
    seen: set[str] = set()
    for p in sorted(submissions.iterdir()):
        if p.name.startswith("."):
            continue
        name = student_name(p)
        if name in seen:  # ``alice`` and ``alice.zip``: the second keeps its suffix
            name = re.sub(r"[^A-Za-z0-9._-]+", "_", p.name)[:100]
        base, n = name, 1
        while name in seen:  # ``x y`` and ``x_y`` clean up alike: a page each, not one
            n += 1
            name = f"{base}-{n}"
        seen.add(name)
        out.append(Entry(name, p))
    return out


def _member_path(name: str) -> PurePosixPath:
    """The relative path a member may be written to; raises `IntakeError` otherwise."""
    if not name or "\\" in name or "\x00" in name:
        raise IntakeError(f"member {name!r}: not a plain relative name")
    path = PurePosixPath(name)
    if path.is_absolute() or name.startswith("/"):
        raise IntakeError(f"member {name}: an absolute path (refused)")
    if any(part == ".." for part in path.parts):
        raise IntakeError(f"member {name}: leaves the archive with '..' (refused)")
    parts = [p for p in path.parts if p not in (".", "")]
    if not parts:
        raise IntakeError(f"member {name!r}: not a plain relative name")
    _check_depth(len(parts), name[:80])
    return PurePosixPath(*parts)


def _check_depth(depth: int, name: str) -> None:
    if depth > MAX_DEPTH:
        raise IntakeError(f"{name}...: more than {MAX_DEPTH} folders deep (refused); hand in "
                          "the result bundles only")


class _Budget:
    """Counts files and bytes written for one submission against its limits."""

    def __init__(self, limits: Limits) -> None:
        self.limits, self.files, self.bytes = limits, 0, 0

    def add_file(self, name: str) -> None:
        self.files += 1
        if self.files > self.limits.max_files:
            raise IntakeError(f"more than {self.limits.max_files} files (at {name}); "
                              "hand in the result bundles only")

    def add_bytes(self, n: int, name: str) -> None:
        self.bytes += n
        if self.bytes > self.limits.max_bytes:
            mb = self.limits.max_bytes / (1 << 20)
            raise IntakeError(f"more than {mb:g} MB once extracted (at {name}; the limit is "
                              "testbed grade --max-mb); hand in the result bundles only")


def _mkdir(dest: Path, rel: PurePosixPath) -> None:
    """dest/rel as a folder (with its parents); `IntakeError` when a file is in the way."""
    try:
        dest.joinpath(*rel.parts).mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise IntakeError(f"member {rel}: given as a file and as a folder (refused)") from None


def _write(src: IO[bytes], dest: Path, rel: PurePosixPath, budget: _Budget) -> None:
    target = dest.joinpath(*rel.parts)
    if len(rel.parts) > 1:
        _mkdir(dest, rel.parent)
    budget.add_file(str(rel))
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except (FileExistsError, IsADirectoryError):
        raise IntakeError(f"member {rel}: given twice, or as a file and as a folder "
                          "(refused)") from None
    with os.fdopen(fd, "wb") as out:
        while chunk := src.read(_CHUNK):
            budget.add_bytes(len(chunk), str(rel))
            out.write(chunk)


def _from_zip(path: Path, dest: Path, budget: _Budget) -> None:
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                rel = _member_path(info.filename.rstrip("/") if info.is_dir()
                                   else info.filename)
                mode = info.external_attr >> 16  # unix mode; no type bits: a plain file
                if stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                    kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
                    raise IntakeError(f"member {info.filename}: {kind} (refused)")
                if info.is_dir():
                    _mkdir(dest, rel)
                    continue
                if info.flag_bits & 0x1:
                    raise IntakeError(f"member {info.filename}: encrypted (refused); hand in "
                                      "an archive without a password")
                try:
                    with zf.open(info) as src:
                        _write(src, dest, rel, budget)
                except (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError) as exc:
                    raise IntakeError(f"member {info.filename}: damaged, cannot be "
                                      f"extracted ({exc})") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, NotImplementedError) as exc:
        raise IntakeError(f"not a readable zip archive ({exc})") from None


def _from_tar(path: Path, dest: Path, budget: _Budget) -> None:
    try:
        with tarfile.open(path, "r:*") as tf:
            for member in tf:
                if member.isdir() and member.name.strip("/") in (".", ""):
                    continue  # the archive's top folder itself ("./")
                rel = _member_path(member.name)
                if member.issym() or member.islnk():
                    kind = "a symbolic link" if member.issym() else "a hard link"
                    raise IntakeError(f"member {member.name}: {kind} (refused)")
                if member.isdir():
                    _mkdir(dest, rel)
                    continue
                if not member.isfile():
                    raise IntakeError(f"member {member.name}: a device, FIFO or other "
                                      "special file (refused)")
                src = tf.extractfile(member)
                if src is None:
                    raise IntakeError(f"member {member.name}: cannot be read")
                with src:
                    _write(src, dest, rel, budget)
    except (tarfile.TarError, EOFError, OSError) as exc:
        if isinstance(exc, IntakeError):
            raise
        raise IntakeError(f"not a readable tar archive ({exc})") from None


def _from_folder(src: Path, dest: Path, budget: _Budget, rel: PurePosixPath | None = None
                 ) -> None:
    here = src if rel is None else src.joinpath(*rel.parts)
    if rel is not None:
        _check_depth(len(rel.parts), str(rel)[:80])
    with os.scandir(here) as it:
        for item in sorted(it, key=lambda e: e.name):
            sub = PurePosixPath(item.name) if rel is None else rel / item.name
            st = item.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise IntakeError(f"{sub}: a symbolic link (refused)")
            if stat.S_ISDIR(st.st_mode):
                _mkdir(dest, sub)
                _from_folder(src, dest, budget, sub)
            elif stat.S_ISREG(st.st_mode):
                if st.st_nlink > 1:
                    raise IntakeError(f"{sub}: a hard link (refused)")
                fd = os.open(item.path, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd, "rb") as f:
                    _write(f, dest, sub, budget)
            else:
                raise IntakeError(f"{sub}: a device, FIFO or socket (refused)")


def take_in(entry: Entry, dest: Path, limits: Limits = Limits()) -> Path:
    """Copy or extract one student's submission into dest (made empty); return dest.

    Raises `IntakeError` naming what was refused; dest may then hold a part of it.
    """
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    budget = _Budget(limits)
    st = os.lstat(entry.path)
    name = entry.path.name.lower()
    if stat.S_ISDIR(st.st_mode):
        _from_folder(entry.path, dest, budget)
    elif not stat.S_ISREG(st.st_mode):
        raise IntakeError(f"{entry.path.name}: not a folder or an archive file (a link or "
                          "special file; refused)")
    elif name.endswith(".zip"):
        _from_zip(entry.path, dest, budget)
    elif name.endswith((".tar.gz", ".tgz", ".tar")):
        _from_tar(entry.path, dest, budget)
    else:
        raise IntakeError(f"{entry.path.name}: not a folder, .zip or .tar.gz")
    return dest
