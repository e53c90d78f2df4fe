"""Build the BPF congestion controls' objects (coupled and hand-over) once and cache them.

The sources (``bpf/*.bpf.c`` and the headers) are compiled with clang against a
``vmlinux.h`` dumped by bpftool from the running kernel's BTF.  The objects are CO-RE
(field offsets are relocated at load time), and they are cached under
``${XDG_CACHE_HOME:-~/.cache}/multipath-testbed/bpf/<key>/`` where the key hashes the
sources, the clang version and the kernel release, so a change to any of them rebuilds.
Concurrent builders take a lock; a build goes into a temporary folder that is renamed
into place when complete, so a half-built cache is never used.

    objs = objects(runner, ["lia", "olia"])      # name -> Path of <name>.bpf.o
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from testbed.core.commands import CommandRunner
from testbed.core.errors import CommandError, MissingFeatureError
from testbed.host.coupled import ALL
from testbed.machine.bpf_support import coupled_problems

SOURCES = Path(__file__).parent / "bpf"
ARCH = {"x86_64": "x86", "aarch64": "arm64", "arm64": "arm64", "s390x": "s390",
        "ppc64le": "powerpc", "riscv64": "riscv"}


def cache_root() -> Path:
    """Where built objects are kept (created on first use)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(os.path.abspath(base)) / "multipath-testbed" / "bpf"


def source_files() -> list[Path]:
    """The C sources and headers, sorted by name."""
    return sorted(p for p in SOURCES.iterdir() if p.suffix in (".c", ".h"))


def build_key(clang_version: str, release: str) -> str:
    """16 hex digits naming one build: sources, compiler and kernel."""
    h = hashlib.sha256()
    for p in source_files():
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    h.update(clang_version.encode() + b"\0" + release.encode())
    return h.hexdigest()[:16]


def clang_argv(src: Path, obj: Path, include: Path) -> list[str]:
    """The clang command that builds one BPF object."""
    arch = ARCH.get(platform.machine(), platform.machine())
    return ["clang", "-O2", "-g", "-Wall", "-target", "bpf", "-mcpu=v3",
            f"-D__TARGET_ARCH_{arch}", "-I", str(include), "-I", str(SOURCES),
            "-c", str(src), "-o", str(obj)]


def objects(runner: CommandRunner, names: Iterable[str] = ALL) -> dict[str, Path]:
    """Build (or find in the cache) the objects of the named controls.

    runner: runs bpftool and clang (recorded in the run's transcript); names: controls
    from `ALL`.  Raises `MissingFeatureError` (exit 2) naming what this machine lacks.
    """
    names = list(names)
    problems = coupled_problems()
    if problems:
        raise MissingFeatureError("BPF congestion controls: " + "; ".join(problems))
    clang = runner.run(["clang", "--version"], record=False).stdout.splitlines()[0]
    key = build_key(clang, os.uname().release)
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    done = root / key
    want = {n: done / f"{n}.bpf.o" for n in names}
    if all(p.is_file() for p in want.values()):
        return want
    with open(root / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all(p.is_file() for p in want.values()):
            _build_into(runner, root, done)
    return want


def _build_into(runner: CommandRunner, root: Path, done: Path) -> None:
    """Compile every control into a fresh folder, then put it at done."""
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        btf = runner.run(["bpftool", "btf", "dump", "file", "/sys/kernel/btf/vmlinux",
                          "format", "c"], record=False, timeout=120).stdout
        (tmp / "vmlinux.h").write_text(btf)
        for name in ALL:
            try:
                runner.run(clang_argv(SOURCES / f"{name}.bpf.c", tmp / f"{name}.bpf.o", tmp),
                           timeout=300)
            except CommandError as exc:
                raise MissingFeatureError(
                    f"BPF congestion control {name!r} does not build here "
                    f"(clang: {exc.stderr.strip().splitlines()[-1:] or exc}); check "
                    "`testbed doctor` and the clang/libbpf-dev packages") from exc
        (tmp / "vmlinux.h").unlink()
        tmp.chmod(0o755)
        if done.exists():
            shutil.rmtree(done)
        os.rename(tmp, done)
    finally:
        with contextlib.suppress(OSError):
            if tmp.exists():
                shutil.rmtree(tmp)
