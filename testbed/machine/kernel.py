"""What a kernel offers the testbed, read without side effects, and a record of it.

`read_kernel_facts` reads the running kernel's release, its congestion controls (the
registered ones from ``/proc/sys/net/ipv4/tcp_available_congestion_control``, and the
``tcp_<name>`` modules that ``modprobe`` could load, from ``/lib/modules/<release>/
modules.dep``; nothing is loaded), whether MPTCP is enabled, and its MPTCP schedulers
(``net.mptcp.available_schedulers`` where the kernel has it; a kernel without
``net.mptcp.scheduler``, before 6.6 such as Debian's 6.1, has only its built-in
default scheduler, which a spec names ``default``).

``testbed doctor`` and every real run's start record these facts in
``<records dir>/<release>.json`` (`record_facts`), so that a dry run on a machine whose
runs go to ``testbed vm`` can check a spec against the VM's kernel (`load_record`).
The records dir is ``$TESTBED_KERNEL_RECORDS`` when set, else
``${XDG_CACHE_HOME:-~/.cache}/multipath-testbed/kernels``.  ``testbed vm`` hands the
host's records dir to the guest in ``TESTBED_KERNEL_RECORDS`` (and shares it writable
when it lies under the VM's private ``/tmp``), so a record made inside the VM lands on
the host.  Records are written with the one atomic writer and read without following a
symbolic link; a record or records dir that is a link is refused.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from testbed.core.errors import InputError
from testbed.core.safefiles import atomic_write_json, check, read_text

RECORD_VERSION = 1
NOT_CC_MODULES = frozenset({"diag"})  # tcp_diag.ko is socket diagnostics, not a CC
DEFAULT_SCHEDULER = "default"
_RELEASE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+~-]{0,127}$")
_MODULE_RE = re.compile(r"(?:^|/)tcp_([a-z0-9_]+)\.ko(?:\.[a-z0-9]+)?:")


@dataclass(frozen=True)
class KernelFacts:
    """What one kernel offers.

    release: ``uname -r``; congestion_controls: registered now (built in or loaded);
    loadable_congestion_controls: ``tcp_<name>`` modules not loaded yet;
    mptcp_enabled: ``net.mptcp.enabled`` is 1 (None: the kernel has no MPTCP);
    mptcp_scheduler: ``net.mptcp.scheduler`` now (None: no such sysctl, kernel < 6.6);
    mptcp_schedulers: ``net.mptcp.available_schedulers`` (None: the kernel does not list
    them); recorded: when these were read (ISO 8601, UTC).
    """

    release: str
    congestion_controls: tuple[str, ...]
    loadable_congestion_controls: tuple[str, ...] = ()
    mptcp_enabled: bool | None = None
    mptcp_scheduler: str | None = None
    mptcp_schedulers: tuple[str, ...] | None = None
    recorded: str = ""
    btf: bool | None = None  # /sys/kernel/btf/vmlinux exists (None: not recorded)

    def offered_ccs(self) -> list[str]:
        """Every congestion control a run may name: registered ones, then loadable ones."""
        return [*self.congestion_controls,
                *(c for c in self.loadable_congestion_controls
                  if c not in self.congestion_controls)]

    def offered_schedulers(self) -> list[str] | None:
        """The MPTCP scheduler names a spec may use here (None: any, the kernel does not
        list them).  Without ``net.mptcp.scheduler`` only ``default`` (the built-in one)."""
        if self.mptcp_scheduler is None:
            return [DEFAULT_SCHEDULER]
        return None if self.mptcp_schedulers is None else list(self.mptcp_schedulers)

    def cc_offer(self) -> str:
        """What the kernel offers, for a message: ``reno cubic; loadable: bbr vegas``."""
        loadable = [c for c in self.loadable_congestion_controls
                    if c not in self.congestion_controls]
        text = " ".join(self.congestion_controls) or "none"
        return text + (f"; loadable: {' '.join(loadable)}" if loadable else "")

    def scheduler_offer(self) -> str:
        """The schedulers, for a message."""
        if self.mptcp_scheduler is None:
            return ("only the built-in default (no net.mptcp.scheduler before Linux 6.6): "
                    "remove transport.scheduler or use \"default\"")
        names = self.offered_schedulers()
        return " ".join(names) if names else "(not listed by this kernel)"

    def summary(self) -> list[str]:
        """The facts as ``testbed doctor`` prints them, one line each."""
        mptcp = {None: "not in this kernel", True: "enabled", False: "disabled"}
        sched = (f"{self.mptcp_scheduler} (available: "
                 f"{' '.join(self.mptcp_schedulers or ()) or 'not listed'})"
                 if self.mptcp_scheduler is not None else
                 "built-in default only (no net.mptcp.scheduler before Linux 6.6)")
        return [f"release {self.release}",
                f"congestion controls: {self.cc_offer()}",
                f"MPTCP: {mptcp[self.mptcp_enabled]}; scheduler: {sched}"]

    def to_json(self) -> dict[str, Any]:
        """The record's contents (versioned)."""
        return {"version": RECORD_VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: Any, where: str) -> KernelFacts:
        """Facts from a record; `InputError` naming where when it is not one."""
        try:
            if not isinstance(data, dict) or data.get("version") != RECORD_VERSION:
                raise ValueError(f"not a version-{RECORD_VERSION} kernel record")
            scheds = data.get("mptcp_schedulers")
            facts = cls(release=_release(data["release"]),
                        congestion_controls=_names(data["congestion_controls"]),
                        loadable_congestion_controls=_names(
                            data.get("loadable_congestion_controls", [])),
                        mptcp_enabled=_opt(data.get("mptcp_enabled"), bool),
                        mptcp_scheduler=_opt(data.get("mptcp_scheduler"), str),
                        mptcp_schedulers=None if scheds is None else _names(scheds),
                        btf=_opt(data.get("btf"), bool),
                        recorded=str(data.get("recorded", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{where}: unreadable kernel record ({exc}); make it again "
                             "with `testbed doctor` (inside the VM: `testbed vm -- testbed "
                             "doctor`)") from None
        return facts


def _names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(
            isinstance(v, str) and re.fullmatch(r"[a-z0-9_]{1,32}", v) for v in value):
        raise ValueError(f"{str(value)[:60]!r} is not a list of names")
    return tuple(value)


def _opt(value: Any, kind: type) -> Any:
    if value is not None and not isinstance(value, kind):
        raise ValueError(f"{value!r} is not a {kind.__name__}")
    return value


def _release(value: Any) -> str:
    if not isinstance(value, str) or not _RELEASE_RE.match(value):
        raise ValueError(f"{str(value)[:60]!r} is not a kernel release")
    return value


# -- reading a live kernel ------------------------------------------------------------
def _read(root: Path, path: str) -> str | None:
    try:
        return (root / path.lstrip("/")).read_text().strip()
    except OSError:
        return None


def loadable_ccs(modules_dep: str) -> list[str]:
    """The congestion controls ``tcp_<name>`` modules provide, from a ``modules.dep``."""
    found = {m.group(1) for m in _MODULE_RE.finditer(modules_dep)}
    return sorted(found - NOT_CC_MODULES)


def read_kernel_facts(root: Path = Path("/"), release: str | None = None,
                      now: dt.datetime | None = None) -> KernelFacts:
    """The running kernel's facts, read from files only (no modprobe, no sysctl -w).

    root: where /proc and /lib/modules are (tests pass a fake tree); release: the
    kernel release (default ``/proc/sys/kernel/osrelease``, else ``os.uname()``);
    now: the time to record (default now).
    """
    release = release or _read(root, "/proc/sys/kernel/osrelease") or os.uname().release
    ccs = (_read(root, "/proc/sys/net/ipv4/tcp_available_congestion_control") or "").split()
    dep = _read(root, f"/lib/modules/{release}/modules.dep") or ""
    enabled = _read(root, "/proc/sys/net/mptcp/enabled")
    avail = _read(root, "/proc/sys/net/mptcp/available_schedulers")
    when = (now or dt.datetime.now(dt.timezone.utc)).isoformat(timespec="seconds")
    return KernelFacts(
        release=release, congestion_controls=tuple(ccs),
        loadable_congestion_controls=tuple(c for c in loadable_ccs(dep) if c not in ccs),
        mptcp_enabled=None if enabled is None else enabled == "1",
        mptcp_scheduler=_read(root, "/proc/sys/net/mptcp/scheduler"),
        mptcp_schedulers=None if avail is None else tuple(avail.split()),
        btf=(root / "sys/kernel/btf/vmlinux").is_file(),
        recorded=when)


def has_module(name: str, root: Path = Path("/"), release: str | None = None) -> bool:
    """Whether the kernel has module name loaded, built in, or loadable, read from
    ``/sys/module`` and ``/lib/modules/<release>/modules.{dep,builtin}`` (nothing is
    loaded).  root: where /sys and /lib are; release: default the running kernel's."""
    if (root / "sys/module" / name).exists():
        return True
    release = release or _read(root, "/proc/sys/kernel/osrelease") or os.uname().release
    pattern = re.compile(rf"(?:^|/){re.escape(name)}\.ko(?:\.[a-z0-9]+)?(?::|$)", re.M)
    return any(pattern.search(_read(root, f"/lib/modules/{release}/{f}") or "")
               for f in ("modules.dep", "modules.builtin"))


# -- the records ----------------------------------------------------------------------
def records_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where kernel records live: ``$TESTBED_KERNEL_RECORDS``, else
    ``${XDG_CACHE_HOME:-~/.cache}/multipath-testbed/kernels`` (absolute).

    env: the environment (default os.environ).
    """
    env = os.environ if env is None else env
    if env.get("TESTBED_KERNEL_RECORDS"):
        return Path(os.path.abspath(env["TESTBED_KERNEL_RECORDS"]))
    cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(os.path.abspath(cache)) / "multipath-testbed" / "kernels"


def record_path(release: str, where: Path | None = None) -> Path:
    """The record file of a kernel release (`InputError` for a release that is no name)."""
    try:
        return (where or records_dir()) / f"{_release(release)}.json"
    except ValueError as exc:
        raise InputError(f"kernel release: {exc}") from None


def _unsafe(path: Path) -> str | None:
    """Why a record path must not be used: the records dir or the record is a symbolic
    link or not what it should be; None when fine or not there yet."""
    if path.parent.is_symlink():  # say so of the folder: "remove" the record would be wrong
        raise InputError(f"{path.parent}: the kernel records folder is a symbolic link (not "
                         "followed); make it a folder of its own, or point "
                         "TESTBED_KERNEL_RECORDS at one")
    why = check(path.parent.parent, path, "file")
    return None if why == "missing" else why


def record_facts(facts: KernelFacts, where: Path | None = None) -> Path:
    """Write facts to their record (atomically); return its path.

    where: the records dir (default `records_dir`).  Raises `InputError` when the record
    or the records dir is a symbolic link (nothing is written), OSError when writing
    fails.
    """
    path = record_path(facts.release, where)
    why = _unsafe(path)
    if why is not None:
        raise InputError(f"{path}: {why}; not writing the kernel record there (remove it)")
    atomic_write_json(path, facts.to_json())
    return path


def load_record(release: str, where: Path | None = None) -> KernelFacts | None:
    """The recorded facts of a kernel release, or None when there is no record.

    Raises `InputError` for a record that is a symbolic link (or in a records dir that is
    one), not a regular file, or not a kernel record.
    """
    path = record_path(release, where)
    if check(path.parent.parent, path, "file") == "missing":
        return None
    why = _unsafe(path)
    if why is not None:
        raise InputError(f"{path}: {why}; not reading this kernel record (remove it and "
                         "run `testbed vm -- testbed doctor` again)")
    try:
        data = json.loads(read_text(path))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: unreadable kernel record ({exc}); remove it and run "
                         "`testbed vm -- testbed doctor` again") from None
    facts = KernelFacts.from_json(data, str(path))
    if facts.release != release:
        raise InputError(f"{path}: records kernel {facts.release}, not {release}; remove it "
                         "and run `testbed vm -- testbed doctor` again")
    return facts

