"""Result folders made under ``sudo`` given back to the person who ran ``sudo``.

The testbed runs as root, but the results are the invoking user's: a student who ran
``sudo testbed study ...`` must be able to read, query, copy and delete what it wrote
without sudo.  `hand_over(top)` gives every file and folder root made under ``top`` to
the invoking user (``SUDO_UID``/``SUDO_GID``, `invoking_user`) and makes it readable
(files ``0644``, ``0755`` when executable; folders ``0755``), and so do the folders above
``top`` that root made inside a folder of that user's (``results/`` of ``results/p0``).
Without ``sudo`` (a normal user, or root logged in as root) it does nothing; files are
readable anyway (`testbed.core.safefiles.atomic_write` writes ``0644``).

What is handed over is only what root made (with ``since``, as the CLI passes it: made or
changed since the command started, so that a command pointed at a folder such as
``/etc`` gives away nothing it did not write): an entry owned by root, reached without
following a symbolic link (every step opens the next entry relative to its folder with
``O_NOFOLLOW``, and ownership and mode are changed on the opened descriptor), a regular
file with a single link or a folder.  So a symbolic link planted in a bundle
(``pcap/x -> /etc``), a hard link to a file elsewhere or a swap of a folder during the
walk never makes root give away or chmod anything outside ``top`` (``top`` itself, named
on the command line, may be a link).  Other entries (FIFOs, sockets, devices, another
user's files) are left as they are, and an entry that cannot be changed (a folder on a
network file system that maps root to nobody) is passed over.  The CLI calls `hand_over`
on the folders a command wrote when the command ends, however it ends
(`testbed.cli.common.hand_over_on_exit`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

FILE_MODE = 0o644
DIR_MODE = 0o755
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def invoking_user() -> tuple[int, int] | None:
    """(uid, gid) of the user who ran ``sudo`` when this process is root under sudo;
    None otherwise (not root, no or malformed ``SUDO_UID``/``SUDO_GID``, or sudo by root)."""
    if os.geteuid() != 0:
        return None
    try:
        uid, gid = int(os.environ["SUDO_UID"]), int(os.environ["SUDO_GID"])
    except (KeyError, ValueError):
        return None
    return (uid, gid) if uid > 0 and gid >= 0 else None


def hand_over(top: Path, since: float | None = None) -> int:
    """Give what root made under top (and the root-made folders above it inside the
    invoking user's folder) to the invoking user, readable; return how many entries
    changed.  Nothing happens without sudo (`invoking_user`) or when top is missing.

    top: an output folder, a bundle or a single file the command wrote; since: only
    entries made or changed at or after this time (their inode change time, ``ctime``),
    i.e. by the command that started then: a command that wrote nothing (``sudo testbed
    report /etc``, refused) gives nothing away, whatever top holds.
    """
    user = invoking_user()
    if user is None:
        return 0
    top = Path(os.path.realpath(top))  # the folder named on the command line may be a link
    changed = sum(_give_folder(folder, ident, user, since)
                  for folder, ident in _made_above(top, user[0]))
    try:
        fd = os.open(top, _OPEN)
    except OSError:
        return changed  # missing
    try:
        return changed + _give(fd, user, since)
    finally:
        os.close(fd)


def _made_above(top: Path, uid: int) -> list[tuple[Path, tuple[int, int]]]:
    """The folders above top that root owns, up to the nearest one owned by uid, each
    with its (device, inode); none when that nearest non-root folder is someone else's
    (``/tmp``, ``/``)."""
    chain: list[tuple[Path, tuple[int, int]]] = []
    for parent in top.parents:
        try:
            st = os.lstat(parent)
        except OSError:
            return []
        if not stat.S_ISDIR(st.st_mode):
            return []
        if st.st_uid == uid:
            return chain
        if st.st_uid != 0:
            return []
        chain.append((parent, (st.st_dev, st.st_ino)))
    return []


def _give_folder(path: Path, ident: tuple[int, int], user: tuple[int, int],
                 since: float | None = None) -> int:
    """Hand over the folder path alone, when it is still the one seen (device, inode)."""
    try:
        fd = os.open(path, _OPEN | os.O_DIRECTORY)
    except OSError:
        return 0
    try:
        st = os.fstat(fd)
        return _one(fd, user, since) if (st.st_dev, st.st_ino) == ident else 0
    finally:
        os.close(fd)


def _one(fd: int, user: tuple[int, int], since: float | None = None) -> int:
    """Hand over the file or folder open as fd when root made it (since: at or after that
    time); 1 when it changed."""
    st = os.fstat(fd)
    if st.st_uid != 0 or (since is not None and st.st_ctime < since):
        return 0
    if stat.S_ISDIR(st.st_mode):
        mode = DIR_MODE
    elif stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
        mode = FILE_MODE | (0o111 if st.st_mode & 0o100 else 0)
    else:
        return 0
    try:
        os.fchown(fd, *user)
        os.fchmod(fd, mode)
    except OSError:
        return 0
    return 1


def _give(fd: int, user: tuple[int, int], since: float | None = None) -> int:
    """Hand over the entry open as fd and, for a folder, everything below it."""
    changed = _one(fd, user, since)
    if not stat.S_ISDIR(os.fstat(fd).st_mode):
        return changed
    for name in os.listdir(fd):
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            continue  # a symbolic link, FIFO, socket or device: left alone, never opened
        try:
            child = os.open(name, _OPEN, dir_fd=fd)
        except OSError:
            continue
        try:
            cst = os.fstat(child)
            if (cst.st_dev, cst.st_ino) == (st.st_dev, st.st_ino):  # not swapped meanwhile
                changed += _give(child, user, since)
        finally:
            os.close(child)
    return changed
