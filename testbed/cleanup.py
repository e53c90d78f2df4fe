"""Removing exactly what a `testbed.network.Network` created: its manifest and the
clean-up that works from it alone (after the creating process died), by name and PID.

`Manifest` lists the host shells (with their network-namespace inodes), the switch
shells, veth ends, OVS bridges and nftables tables of one network; the Network rewrites
``<workdir>/network.json`` as it creates them.  `remove_leftovers` removes whatever of a
manifest still exists: processes only while they sit in one of the recorded namespaces
(and, for a manifest from an earlier process, only while the host's Mininet shell is
still alive in it, so a re-used PID or namespace number is never signalled), interfaces
only under their recorded names, bridges only if OVS lists them.  `cleanup_from_manifest`
adds the nftables tables; `keep_ovs_state` saves OVS's view of a failed start.
Nothing here matches by pattern (never ``mn -c``, ``pkill -f``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from testbed.commands import CommandRunner
from testbed.errors import TestbedError

MANIFEST = "network.json"


@dataclass
class Manifest:
    """Everything a `Network` created, by name/PID, for exact clean-up."""

    hosts: dict[str, int] = field(default_factory=dict)       # host -> shell pid
    netns: dict[str, int] = field(default_factory=dict)       # host -> netns inode
    switches: dict[str, int] = field(default_factory=dict)    # switch -> shell pid
    interfaces: list[str] = field(default_factory=list)       # veth ends (any namespace)
    bridges: list[str] = field(default_factory=list)          # OVS bridges
    nft_tables: list[list[str]] = field(default_factory=list)  # [family, name]

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1, sort_keys=True) + "\n")

    @classmethod
    def read(cls, path: Path) -> Manifest:
        return cls(**json.loads(path.read_text()))


def parse_link_names(text: str) -> list[str]:
    """Interface names from ``ip -o link show`` output (``"3: s1-eth1@if2: ..."``)."""
    names = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2 and parts[0].strip().isdigit():
            names.append(parts[1].strip().split("@", 1)[0])
    return names


def netns_inode(pid: int) -> int | None:
    """The network-namespace inode of a process, or None if it is gone."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def pids_in_netns(inodes: set[int], exclude: Iterable[int] = ()) -> list[int]:
    """PIDs of processes whose network namespace is one of ``inodes``."""
    skip = set(exclude) | {os.getpid()}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        ino = netns_inode(int(entry))
        if ino is not None and ino in inodes:
            found.append(int(entry))
    return found


def kill_pids(pids: Sequence[int], grace: float = 2.0) -> list[int]:
    """SIGTERM each PID, wait up to ``grace`` s, SIGKILL the rest; return those signalled."""
    hit = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            hit.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.time() + grace
    alive = list(hit)
    while alive and time.time() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if _alive(p)]
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return hit


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return False


def keep_ovs_state(runner: CommandRunner, dest: Path) -> None:
    """Copy into dest what OVS knows about its controller connections: every controller
    record (``ovs-controllers.txt``: is_connected, status) and ovs-vswitchd's log.
    Never raises: it runs while something else already went wrong."""
    try:
        dest.mkdir(parents=True, exist_ok=True)
        res = runner.run(["ovs-vsctl", "--timeout=30", "list", "controller"], check=False,
                         record=False, timeout=60)
        (dest / "ovs-controllers.txt").write_text(res.stdout + res.stderr)
        log = Path("/var/log/openvswitch/ovs-vswitchd.log")
        if log.exists():
            shutil.copyfile(log, dest / "ovs-vswitchd.log")
    except (OSError, TestbedError) as exc:
        with contextlib.suppress(OSError):
            (dest / "ovs-controllers.txt").write_text(f"could not read OVS state: {exc}\n")


def is_mininet_shell(pid: int, node: str) -> bool:
    """True if pid is still the shell Mininet started for node (``mininet:<node>``)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f"mininet:{node}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def remove_leftovers(manifest: Manifest, runner: CommandRunner, fresh: bool = True
                     ) -> dict[str, list[str]]:
    """Remove whatever in manifest still exists, by name/PID; return what was removed.

    Interfaces are deleted only if they still exist under their recorded name, bridges
    only if OVS lists them.  Processes are signalled only while they are in one of the
    recorded network namespaces; fresh=False (a manifest from an earlier process)
    trusts a namespace only while its host's Mininet shell is still alive in it, so a
    re-used PID or namespace number is never signalled.
    """
    report: dict[str, list[str]] = {}
    inodes = {ino for name, ino in manifest.netns.items()
              if fresh or (is_mininet_shell(manifest.hosts[name], name)
                           and netns_inode(manifest.hosts[name]) == ino)}
    stray = pids_in_netns(inodes)
    if stray:
        report["processes"] = [str(p) for p in kill_pids(stray)]
    for name, pid in manifest.switches.items():
        if is_mininet_shell(pid, name):
            kill_pids([pid])
            report.setdefault("processes", []).append(f"{pid} ({name})")
    links = set(parse_link_names(runner.run(["ip", "-o", "link", "show"], record=False).stdout))
    for name in manifest.interfaces:
        if name in links:
            runner.run(["ip", "link", "del", "dev", name], check=False)
            report.setdefault("interfaces", []).append(name)
    if manifest.bridges:
        res = runner.run(["ovs-vsctl", "--timeout=10", "list-br"], check=False, record=False)
        for br in sorted(set(res.stdout.split()) & set(manifest.bridges)):
            runner.run(["ovs-vsctl", "--timeout=10", "--if-exists", "del-br", br])
            report.setdefault("bridges", []).append(br)
    return report


def cleanup_from_manifest(path: Path, runner: CommandRunner | None = None
                          ) -> dict[str, list[str]]:
    """Finish the clean-up of a network whose process died (e.g. SIGKILL).

    path: its ``network.json``; returns what was removed.
    """
    runner = runner or CommandRunner()
    manifest = Manifest.read(path)
    report = remove_leftovers(manifest, runner, fresh=False)
    for family, name in manifest.nft_tables:
        if runner.ok(["nft", "list", "table", family, name], record=False):
            runner.run(["nft", "delete", "table", family, name])
            report.setdefault("nft_tables", []).append(f"{family} {name}")
    return report
