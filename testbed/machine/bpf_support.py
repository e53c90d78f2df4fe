"""Can this machine run the testbed's BPF congestion controls (`testbed.host.coupled`)?

What they need (all present on Debian 12 / Ubuntu 22.04+ with ``scripts/install``):

* kernel BTF (``/sys/kernel/btf/vmlinux``): the programs are CO-RE and ``struct_ops``
  checks them against it;
* Linux 5.19 or later: ``struct_ops`` ``tcp_congestion_ops`` (5.6), the CC kfuncs
  (5.13), ``bpf_loop`` (5.17) and MPTCP subflows that carry their connection (5.19);
* the toolchain that builds them: ``clang``, ``bpftool`` and libbpf's headers
  (``/usr/include/bpf/bpf_helpers.h``; package libbpf-dev).

`coupled_problems` returns one line per missing piece (empty: all there); the doctor
prints them and a spec that names a coupled control is refused with them (exit 2).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

BTF = "sys/kernel/btf/vmlinux"
HEADER = "usr/include/bpf/bpf_helpers.h"
MIN_KERNEL = (5, 19)
TOOLS = ("clang", "bpftool")


def kernel_version(release: str) -> tuple[int, int]:
    """(major, minor) of a kernel release string such as ``6.1.0-56-amd64``."""
    m = re.match(r"(\d+)\.(\d+)", release)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _which(name: str, root: Path) -> bool:
    for d in os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin").split(os.pathsep):
        if d and (root / d.lstrip("/") / name).is_file():
            return True
    return False


def coupled_problems(release: str | None = None, root: Path = Path("/"),
                     btf: bool | None = None) -> list[str]:
    """What stops the coupled controls here, one line each (empty: nothing).

    release: the kernel release (default: the running one); root: where /sys and /usr
    are (tests); btf: whether that kernel has BTF, when known from a record (None: look
    at /sys/kernel/btf/vmlinux; used for the running kernel).
    """
    release = release or os.uname().release
    out = []
    if kernel_version(release) < MIN_KERNEL:
        out.append(f"kernel {release} is older than 5.19 (struct_ops congestion controls, "
                   "bpf_loop, MPTCP subflow contexts); use `testbed vm` or a newer kernel")
    if not (btf if btf is not None else (root / BTF).is_file()):
        out.append(f"no kernel BTF (/{BTF}); use a kernel built with CONFIG_DEBUG_INFO_BTF "
                   "(Debian/Ubuntu stock kernels are) or `testbed vm`")
    missing = [t for t in TOOLS if not _which(t, root)]
    if not (root / HEADER).is_file():
        missing.append("libbpf-dev")
    if missing:
        out.append(f"BPF toolchain missing: {', '.join(missing)}; run `scripts/install` "
                   "(Debian/Ubuntu packages clang, llvm, libbpf-dev, bpftool)")
    return out
