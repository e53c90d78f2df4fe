"""Files inside folders someone else made (result bundles, studies), read without surprises.

A bundle may come from another person, and the tools that read it may run as root.  A
symbolic link inside it (``metrics -> /etc``, ``spec.toml -> /root/.ssh/id_rsa``) must not
make a report read, or write, a file outside the bundle, and a FIFO or device named like a
bundle file must not hang it.  So these helpers:

* `check(root, path)`: why path must be skipped (a symbolic link in any component below
  root, or not a regular file / directory), or None when it is fine;
* `file_in(root, rel, warnings)`, `dir_in(root, rel, warnings)`: the path when it is a
  regular file / real directory inside root; None otherwise, adding
  ``skipped <path>: <reason>`` to warnings when something is there but not followed;
* `files_in(root, rel, suffixes, warnings)`: the regular files of a folder;
* `safe_href(target)`: a link a report may write (http(s), or relative inside its folder);
* `read_bytes(path, limit)` / `read_text(path)`: open with ``O_NOFOLLOW`` and refuse anything
  but a regular file (checked on the open descriptor, so a swap after `check` does not
  help), or one larger than limit bytes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from testbed.core.errors import InputError

SYMLINK = "a symbolic link (not followed)"
FILE_MODE = 0o644  # what `atomic_write` makes: results are for reading


class UnsafeFileError(InputError):
    """A bundle file is a symbolic link, a device or a FIFO, not a regular file."""


def check(root: Path, path: Path, want: str = "file") -> str | None:
    """Why path (inside root) must not be opened, or None.

    root: the trusted top (the bundle or output folder the user named; itself may be a
    link); path: a path below root; want: "file" or "dir".  Every component from root down
    to path is checked with lstat: none may be a symbolic link.  A missing path gives
    "missing".
    """
    root, path = Path(root), Path(path)
    try:
        rel = path.relative_to(root)
    except ValueError:
        return "outside the folder"
    here = root
    for i, part in enumerate(rel.parts):
        if part in ("..", ""):
            return "outside the folder"
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return "missing"
        except OSError as exc:
            return f"unreadable ({exc.strerror})"
        if stat.S_ISLNK(st.st_mode):
            return SYMLINK
        last = i == len(rel.parts) - 1
        if not last and not stat.S_ISDIR(st.st_mode):
            return "missing"
        if last:
            if want == "dir" and not stat.S_ISDIR(st.st_mode):
                return "not a directory"
            if want == "file" and not stat.S_ISREG(st.st_mode):
                return "not a regular file"
    return None


def linked_part(root: Path, path: Path) -> Path | None:
    """The first part of path below root that is a symbolic link (relative to root), or
    None: what `check` calls a link, named."""
    try:
        parts = Path(path).relative_to(root).parts
    except ValueError:
        return None
    return next((Path(*parts[:i]) for i in range(1, len(parts) + 1)
                 if (Path(root) / Path(*parts[:i])).is_symlink()), None)


def _pick(root: Path, rel: str | Path, want: str, warnings: list[str] | None) -> Path | None:
    path = Path(root) / rel
    why = check(root, path, want)
    if why is None:
        return path
    if why != "missing" and warnings is not None:
        warnings.append(f"skipped {path}: {why}")
    return None


def file_in(root: Path, rel: str | Path, warnings: list[str] | None = None) -> Path | None:
    """root/rel when it is a regular file reached without symbolic links, else None.

    warnings: gets ``skipped <path>: <reason>`` when something is there but not used.
    """
    return _pick(root, rel, "file", warnings)


def dir_in(root: Path, rel: str | Path, warnings: list[str] | None = None) -> Path | None:
    """root/rel when it is a directory reached without symbolic links, else None."""
    return _pick(root, rel, "dir", warnings)


def files_in(root: Path, rel: str | Path, suffixes: tuple[str, ...] = (),
             warnings: list[str] | None = None) -> list[Path]:
    """The regular files directly in root/rel (sorted), with one of suffixes if given.

    Links and other non-regular entries are left out, each with a warning.
    """
    d = dir_in(root, rel, warnings)
    if d is None:
        return []
    out = []
    for p in sorted(d.iterdir()):
        if suffixes and p.suffix not in suffixes:
            continue
        if file_in(root, p.relative_to(root), warnings) is not None:
            out.append(p)
    return out


class FileTooLargeError(InputError):
    """A file larger than its reader allows."""


def read_bytes(path: Path, limit: int | None = None) -> bytes:
    """The contents of a regular file, opened without following a final symbolic link.

    limit: the most bytes allowed (None: no bound).  Raises `UnsafeFileError` for a link,
    FIFO, device or directory, `FileTooLargeError` above limit; OSError otherwise.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if os.path.islink(path):
            raise UnsafeFileError(f"{path}: {SYMLINK}") from None
        raise exc
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise UnsafeFileError(f"{path}: not a regular file; skipped")
        data = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise FileTooLargeError(f"{path}: larger than {limit} bytes")
    return data


def read_text(path: Path) -> str:
    """`read_bytes` decoded as UTF-8 (undecodable bytes replaced)."""
    return read_bytes(path).decode("utf-8", errors="replace")


def safe_href(target: str) -> str | None:
    """A link target fit for a report, or None: an ``http(s)://`` URL, or a relative path
    to a file inside the report's folder (``./<quoted path>``; no scheme such as
    ``javascript:``, no ``..``, no absolute path)."""
    text = str(target).strip()
    if re.match(r"(?i)^https?://[^\s\"'<>]+$", text):
        parts = urlsplit(text)
        return text if parts.netloc else None
    if not text or text.startswith(("/", "\\")) or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", text):
        return None
    segments = text.replace("\\", "/").split("/")
    if any(seg in ("", ".", "..") for seg in segments) or any(
            ord(c) < 32 for c in text):
        return None
    return "./" + "/".join(quote(seg, safe="") for seg in segments)


# ---------------------------------------------------------------------------------------
# the one atomic writer


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write path so that readers see either the old file or the whole new one.

    path: destination, made ``0644`` (`FILE_MODE`); write: called with a temporary sibling
    to fill (it may close and reopen it).  Then fsync, rename over path, fsync of the
    directory; on any error the temporary file is removed and path is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, FILE_MODE)  # readable by all, as a file made with umask 022 (not 0600)
    finally:
        os.close(fd)
    try:
        write(Path(tmp))
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """`atomic_write` of data."""
    atomic_write(path, lambda p: p.write_bytes(data))


def atomic_write_text(path: Path, text: str) -> None:
    """`atomic_write` of UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write obj as indented JSON, atomically (non-JSON values become strings)."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
