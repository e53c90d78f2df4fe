"""A finished bundle on the wire: packed on the node that ran it, installed on the head.

`pack_bundle(root)` makes an uncompressed tar of a bundle folder holding real folders and
regular files only (a symbolic link, FIFO or device refuses the whole bundle: nothing is
followed); `install_bundle(data, out, run_id)` unpacks it -- never with ``tarfile``'s own
extraction: each member is checked (a relative name without ``..``, a folder or a regular
file, sizes within limits) and written with ``O_NOFOLLOW | O_EXCL`` -- into a hidden
staging folder inside ``out``, checks that it is a finished bundle of that run (its
metadata names the run; a ``complete`` one has every file of its manifest with the recorded
size and sha256), and only then renames it to ``out/<run id>``.  So ``--out`` never
holds a partial bundle (docs/security.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import stat
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from testbed.core import safefiles
from testbed.core.errors import NodeError, TestbedError
from testbed.results.bundle import COMPLETE, FAILED, Bundle, move_aside

MAX_BUNDLE_BYTES = 8 << 30  # what one bundle may unpack to
MAX_MEMBERS = 200_000
MAX_MTIME = float(1 << 33)  # year 2242: a file's time past it is clamped, not refused
STAGING_PREFIX = ".incoming-"


class TransferError(NodeError):
    """A bundle sent back by a node is not a whole, finished bundle of its run."""


def pack_bundle(root: Path) -> bytes:
    """The bundle folder root as tar bytes (folders and regular files, paths relative to
    root); raises `safefiles.UnsafeFileError` for anything else inside it."""
    root = Path(root)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add_tree(tar, root, PurePosixPath())
    return buf.getvalue()


def _add_tree(tar: tarfile.TarFile, root: Path, rel: PurePosixPath) -> None:
    here = root / rel
    for name in sorted(os.listdir(here)):
        path, member = here / name, rel / name
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            info = tarfile.TarInfo(member.as_posix())
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(st.st_mtime)
            tar.addfile(info)
            _add_tree(tar, root, member)
        elif stat.S_ISREG(st.st_mode):
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                info = tarfile.TarInfo(member.as_posix())
                info.size, info.mode, info.mtime = size, 0o644, st.st_mtime
                tar.addfile(info, f)
        else:
            why = safefiles.SYMLINK if stat.S_ISLNK(st.st_mode) else "not a regular file"
            raise safefiles.UnsafeFileError(f"{path}: {why}; a bundle holds regular files "
                                            "only, so it is not sent")


def _member_path(name: str) -> PurePosixPath:
    """A member's name as a safe relative path, or `TransferError`."""
    p = PurePosixPath(name)
    if not name or p.is_absolute() or any(part in ("", ".", "..") for part in p.parts) \
            or "\\" in name or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise TransferError(f"bundle member {name!r}: not a plain relative path")
    return p


def unpack_bundle(data: bytes, dest: Path, limit: int = MAX_BUNDLE_BYTES) -> None:
    """Unpack tar bytes made by `pack_bundle` into the new folder dest (it must not exist).

    Only folders and regular files, each written without following a link and never over
    an existing file; raises `TransferError` for anything else, for a member outside dest,
    or when the files add up to more than limit bytes.
    """
    dest = Path(dest)
    dest.mkdir(mode=0o755)
    total = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for n, info in enumerate(tar, 1):
            if n > MAX_MEMBERS:
                raise TransferError(f"bundle has more than {MAX_MEMBERS} members")
            rel = _member_path(info.name)
            target = dest / rel
            parent = safefiles.check(dest, target.parent, "dir") if rel.parent.parts else None
            if parent is not None:
                raise TransferError(f"bundle member {info.name!r}: its folder is {parent}")
            if info.isdir():
                with contextlib.suppress(FileExistsError):
                    target.mkdir(mode=0o755)
                if safefiles.check(dest, target, "dir") is not None:
                    raise TransferError(f"bundle member {info.name!r}: not a folder")
                continue
            if not info.isreg():
                raise TransferError(f"bundle member {info.name!r}: not a regular file or folder")
            total += info.size
            if total > limit:
                raise TransferError(f"bundle is larger than {limit} bytes")
            src = tar.extractfile(info)
            if src is None:
                raise TransferError(f"bundle member {info.name!r}: no data")
            try:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                             safefiles.FILE_MODE)
            except FileExistsError:
                raise TransferError(f"bundle member {info.name!r}: in the bundle twice "
                                    "(or a link where it would go)") from None
            with os.fdopen(fd, "wb") as f:
                shutil.copyfileobj(src, f)
            mtime = min(max(float(info.mtime), 0.0), MAX_MTIME)
            os.utime(target, (mtime, mtime))


def check_finished(bundle: Bundle, run_id: str) -> str:
    """The status of a received bundle of run_id (``complete`` or ``failed``); raises
    `TransferError` when it is not a finished bundle of that run."""
    meta = bundle.read_metadata()
    if not meta or meta.get("run_id") != run_id:
        raise TransferError(f"{run_id}: the bundle sent back is not this run's")
    status = bundle.status()
    if status == COMPLETE:
        changed = bundle.check_sha256_manifest()
        if changed:
            raise TransferError(f"{run_id}: the bundle arrived damaged: {changed[0]}")
        return status
    if status == FAILED:
        return status
    raise TransferError(f"{run_id}: the bundle sent back is {status}, not finished")


def install_bundle(data: bytes, out: Path, run_id: str, sha256: str | None = None
                   ) -> Bundle:
    """Unpack a bundle sent back by a node into ``out/<run id>``, atomically.

    sha256: the digest of data the node computed (`pack_bundle`'s caller); a mismatch is
    a bundle damaged on the way.  Any bundle that cannot be read or checked raises
    `TransferError` (the node's failure: the run is sent again); an error writing into
    out is this machine's and raises as it is (`OSError`).

    It is unpacked into a hidden staging folder inside out, checked (`check_finished`),
    then renamed into place; an unfinished bundle already there is moved aside to
    ``_attempts`` first (as a local sweep does).  On any error nothing is left in out.
    """
    out = Path(out)
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise TransferError(f"{run_id}: the bundle arrived damaged (its sha256 differs "
                            "from the one the node computed)")
    staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{run_id}-", dir=out))
    try:
        try:
            unpack_bundle(data, staging / run_id)
            received = Bundle(staging / run_id)
            check_finished(received, run_id)
        except TransferError:
            raise
        except (tarfile.TarError, ValueError, OverflowError, TestbedError) as exc:
            # unreadable tar bytes, a member the tar reader cannot represent, a metadata
            # or manifest the bundle readers refuse: the node sent no usable bundle
            raise TransferError(f"{run_id}: the bundle sent back cannot be read: "
                                f"{type(exc).__name__}: {exc}") from None
        final = Bundle(out / run_id)
        if os.path.lexists(final.root):
            move_aside(out, final)
        os.rename(received.root, final.root)
        return final
    finally:
        shutil.rmtree(staging, ignore_errors=True)
