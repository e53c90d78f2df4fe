"""Register the coupled controls a run needs, and unregister them afterwards.

    with CoupledControls(runner, ["lia"], samples_dir=bundle.samples_dir):
        ...  # hosts may now choose "lia" (sysctl or setsockopt TCP_CONGESTION)

Each control is one ``struct_ops`` map registered with ``bpftool struct_ops register``
(its name, e.g. ``lia``, joins ``tcp_available_congestion_control``; the flag
``TCP_CONG_NON_RESTRICTED`` lets a Mininet host's namespace make it its default).  On
the way out the decision log (`testbed.host.coupled.trace`) is saved as
``samples/cc-trace-<name>.jsonl`` and the map is unregistered by the id this run got,
after checking that the id still names the control.  The kernel frees the programs
and maps once no socket or namespace uses the control any more (the network's
namespaces are deleted when it stops).

After a crash: every registration is also recorded in the testbed's state directory
(`testbed.core.statedir`, ``bpf/<pid>-<start>.json``); `release_stale` (called before
each registration) unregisters what a process that no longer runs left behind, by id
and only while the id still carries the recorded name.  A control of the same name that
somebody else registered is never touched: the run is refused with one line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from types import TracebackType

from testbed.core.commands import CommandRunner
from testbed.core.errors import CommandError, MissingFeatureError, UnsupportedError
from testbed.core.safefiles import atomic_write_text
from testbed.core.statedir import process_start_time, state_dir
from testbed.host.coupled import HANDOVER
from testbed.host.coupled.build import objects
from testbed.host.coupled.trace import parse_dump
from testbed.host.handover.log import parse_handover_dump, wall_minus_mono

REGISTERED = re.compile(r"Registered tcp_congestion_ops (\S+) id (\d+)")


def registry_dir() -> Path:
    """Where registrations are recorded (in the state directory)."""
    path = state_dir() / "bpf"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def struct_ops_name(runner: CommandRunner, map_id: int) -> str | None:
    """The name registered under struct_ops map id, or None when there is none."""
    res = runner.run(["bpftool", "-j", "struct_ops", "show", "id", str(map_id)],
                     check=False, record=False)
    if res.returncode != 0:
        return None
    try:
        data = json.loads(res.stdout)
    except ValueError:
        return None
    if isinstance(data, list):
        data = data[0] if data else {}
    return data.get("name") if isinstance(data, dict) else None


def unregister(runner: CommandRunner, map_id: int, name: str) -> bool:
    """Unregister struct_ops map id if it still names control name; True if done."""
    if struct_ops_name(runner, map_id) != name:
        return False
    runner.run(["bpftool", "struct_ops", "unregister", "id", str(map_id)], check=False)
    return True


def release_stale(runner: CommandRunner) -> list[str]:
    """Unregister what dead testbed processes registered; returns ``name (id N)`` each."""
    released = []
    for path in sorted(registry_dir().glob("*.json")):
        try:
            data = json.loads(path.read_text())
            pid, start = int(data["pid"]), int(data["start"])
            controls = {str(k): int(v) for k, v in data["controls"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            path.unlink(missing_ok=True)
            continue
        if process_start_time(pid) == start:
            continue  # its owner still runs
        for name, map_id in controls.items():
            if unregister(runner, map_id, name):
                released.append(f"{name} (id {map_id})")
        path.unlink(missing_ok=True)
    return released


def map_ids(runner: CommandRunner, name: str) -> dict[str, int]:
    """The maps control name's programs use, by map name (the newest id of each name)."""
    res = runner.run(["bpftool", "-j", "prog", "show"], check=False, record=False)
    try:
        progs = json.loads(res.stdout) if res.returncode == 0 else []
    except ValueError:
        return {}
    ids = {m for p in progs if p.get("type") == "struct_ops"
           and str(p.get("name", "")).startswith(f"{name}_"[:15])
           for m in p.get("map_ids", [])}
    if not ids:
        return {}
    # every map in one listing: a program start costs a few tenths of a second under
    # software emulation, and a control's programs use several maps
    res = runner.run(["bpftool", "-j", "map", "show"], check=False, record=False)
    try:
        maps = json.loads(res.stdout) if res.returncode == 0 else []
    except ValueError:
        return {}
    found: dict[str, int] = {}
    for m in sorted((m for m in maps if isinstance(m, dict) and m.get("id") in ids),
                    key=lambda m: m["id"]):
        found[str(m.get("name"))] = int(m["id"])
    return found


def trace_map_id(runner: CommandRunner, name: str) -> int | None:
    """The id of the ``trace`` map used by control name's programs (None: not found)."""
    return map_ids(runner, name).get("trace")


def _available() -> list[str]:
    """The congestion controls registered now."""
    path = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
    return path.read_text().split()


class CoupledControls:
    """The named coupled controls, registered for the duration of a ``with`` block.

    runner: the run's command runner; names: controls from
    `testbed.host.coupled.COUPLED`; samples_dir: where the decision logs go (None: not
    kept).
    """

    def __init__(self, runner: CommandRunner, names: list[str],
                 samples_dir: Path | None = None):
        self.runner = runner
        self.names = sorted(set(names))
        self.samples_dir = samples_dir
        self.ids: dict[str, int] = {}
        self._record: Path | None = None

    def __enter__(self) -> CoupledControls:
        if not self.names:
            return self
        release_stale(self.runner)
        objs = objects(self.runner, self.names)
        start = process_start_time(os.getpid())
        self._record = registry_dir() / f"{os.getpid()}-{start}.json"
        try:
            for name in self.names:
                self.ids[name] = self._register(name, objs[name])
                atomic_write_text(self._record, json.dumps(
                    {"pid": os.getpid(), "start": start, "controls": self.ids}) + "\n")
        except BaseException:
            self.close()
            raise
        return self

    def _register(self, name: str, obj: Path) -> int:
        if name in _available():
            raise UnsupportedError(
                f"congestion control {name!r} is already registered by something other "
                f"than this run (see `bpftool struct_ops show`); unregister it first")
        res = self.runner.run(["bpftool", "struct_ops", "register", str(obj)], check=False,
                              timeout=300)
        m = REGISTERED.search(res.stdout + res.stderr)
        if res.returncode != 0 or not m or m.group(1) != name:
            tail = [ln for ln in (res.stderr or res.stdout).splitlines() if ln.strip()][-3:]
            raise MissingFeatureError(f"the kernel refused the coupled congestion control "
                                      f"{name!r}: {' | '.join(tail)}")
        return int(m.group(2))

    def close(self) -> None:
        """Save the decision logs and unregister (idempotent)."""
        for name, map_id in list(self.ids.items()):
            with contextlib.suppress(CommandError, OSError, ValueError):
                self._save_trace(name)
            with contextlib.suppress(CommandError):
                unregister(self.runner, map_id, name)
            del self.ids[name]
        if self._record is not None:
            self._record.unlink(missing_ok=True)
            self._record = None

    def _save_trace(self, name: str) -> None:
        if self.samples_dir is None:
            return
        if name in HANDOVER:
            self._save_handover_log(name)
            return
        map_id = trace_map_id(self.runner, name)
        if map_id is None:
            return
        # without -j: with BTF, bpftool prints the typed records alone, as JSON (-j adds
        # every byte in hex as well, three times the text)
        res = self.runner.run(["bpftool", "map", "dump", "id", str(map_id)], timeout=120)
        rows = parse_dump(res.stdout, name)
        self.samples_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.samples_dir / f"cc-trace-{name}.jsonl",
                          "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))

    def _save_handover_log(self, name: str) -> None:
        assert self.samples_dir is not None
        map_id = map_ids(self.runner, name).get("ho_log")
        if map_id is None:
            return
        res = self.runner.run(["bpftool", "map", "dump", "id", str(map_id)], timeout=120)
        rows = parse_handover_dump(res.stdout, name, wall_minus_mono())
        self.samples_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.samples_dir / f"handover-{name}.jsonl",
                          "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
