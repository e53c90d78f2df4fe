"""The testbed's own state directory (trusted copies of what it created, for clean-up
after a crash): ``$TESTBED_STATE_DIR``, else ``/run/testbed`` for root, else per user.

Network manifests (`testbed.net.cleanup`) and registered BPF congestion controls
(`testbed.host.coupled.loader`) keep their records here, never in an output folder.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from testbed.core.errors import InputError

STATE_DIR_ENV = "TESTBED_STATE_DIR"
ROOT_STATE_DIR = Path("/run/testbed")


def state_dir() -> Path:
    """The testbed's own state directory, created 0700 if absent.

    ``$TESTBED_STATE_DIR`` when set (tests), else ``/run/testbed`` for root, else a
    per-user folder (``$XDG_RUNTIME_DIR/testbed`` or ``<tmp>/testbed-<uid>``).  It must be
    a real directory (no symbolic link) owned by us and closed to others; otherwise
    `InputError` names it.
    """
    env = os.environ.get(STATE_DIR_ENV)
    if env:
        path = Path(env)
    elif os.geteuid() == 0:
        path = ROOT_STATE_DIR
    else:
        import tempfile

        runtime = os.environ.get("XDG_RUNTIME_DIR")
        path = (Path(runtime) / "testbed" if runtime
                else Path(tempfile.gettempdir()) / f"testbed-{os.geteuid()}")
    if not private_dir(path):
        raise InputError(f"{path}: the testbed's state directory must be a directory owned "
                         f"by this user and writable by no one else; fix or remove it "
                         f"(or set {STATE_DIR_ENV})")
    return path


def private_dir(path: Path) -> bool:
    """Create path (0700, with its parents) if absent; True when it is then a real
    directory (no symbolic link) owned by this user and writable by no one else -- a
    folder nobody else can have planted or can change."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700, parents=True)
    st = os.lstat(path)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def process_start_time(pid: int) -> int | None:
    """A process's start time (clock ticks after boot, /proc/<pid>/stat field 22), or None
    when it is gone; with the pid it names one process even after pid reuse."""
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return int(f.read().rsplit(") ", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None
