"""Removing exactly what a `testbed.net.network.Network` created: its manifest and the
clean-up that works from it alone (after the creating process died), by name and PID.

`Manifest` lists the host shells (with their network-namespace inodes and the ``ip
netns`` handles kept on them), the switch shells, veth ends, OVS bridges and nftables
tables of one network; the Network rewrites
``<workdir>/network.json`` as it creates them.  `remove_leftovers` removes whatever of a
manifest still exists: processes only while they sit in one of the recorded namespaces
(and, for a manifest from an earlier process, only while the host's Mininet shell is
still alive in it, so a re-used PID or namespace number is never signalled), interfaces
only under their recorded names, bridges only if OVS lists them.  `cleanup_from_manifest`
adds the nftables tables and the recorded processes (the controller: pid and start
time); `keep_ovs_state` saves OVS's view of a failed start.
Nothing here matches by pattern (never ``mn -c``, ``pkill -f``).

Tags: a manifest carries a tag of its own (`new_tag`), and everything its network makes
in the root namespace carries it too (`Manifest.label`, ``testbed-net=<tag>``): each
switch-side veth end as its interface alias, each OVS bridge as ``external_ids``, each
nftables table as its comment.  The clean-up removes an interface, bridge or table only
when it still carries the manifest's label, so a name that now belongs to something else
(another network, another tool) is left alone and reported under ``"untagged"``.  A
manifest without a tag (written before tags) removes none of them.

Which manifest is trusted: an output folder is anybody's (a bundle may come from someone
else), so clean-up never acts on the ``network.json`` / ``_kept-network.json`` it finds
there.  Every `Manifest.write` also writes (atomically) a copy into the testbed's own
state directory (`state_dir`: ``$TESTBED_STATE_DIR``, else ``/run/testbed`` for root,
made 0700 and owned by us), keyed by the output path; `cleanup_from_manifest` acts on
that copy alone, and says so when the output-folder file differs from it (or when there
is no copy: then nothing is removed).  `Manifest.discard` removes the copies once the
network is gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from testbed.core.commands import CommandRunner
from testbed.core.errors import InputError, TestbedError
from testbed.core.safefiles import atomic_write_text
from testbed.core.statedir import (  # noqa: F401
    ROOT_STATE_DIR,
    STATE_DIR_ENV,
    process_start_time,
    state_dir,
)
from testbed.net.netns import (
    NETNS_DIR,
    NODE_NAME,
    ShellRef,
    destroy_sockets,
    destroy_sockets_in,
    netns_handle,
)
from testbed.net.tags import TAG_RE, bridge_labels, label_of, link_aliases, new_tag, nft_comments

MANIFEST = "network.json"


def state_copy(path: Path) -> Path:
    """Where the trusted copy of the manifest written to path lives (in `state_dir`)."""
    key = hashlib.sha256(str(Path(os.path.abspath(path))).encode()).hexdigest()[:32]
    return state_dir() / "networks" / f"{key}.json"


@dataclass
class Manifest:
    """Everything a `Network` created, by name/PID and tag, for exact clean-up."""

    hosts: dict[str, int] = field(default_factory=dict)       # host -> shell pid
    netns: dict[str, int] = field(default_factory=dict)       # host -> netns inode
    switches: dict[str, int] = field(default_factory=dict)    # switch -> shell pid
    interfaces: list[str] = field(default_factory=list)       # veth ends (any namespace)
    bridges: list[str] = field(default_factory=list)          # OVS bridges
    nft_tables: list[list[str]] = field(default_factory=list)  # [family, name]
    netns_handles: list[str] = field(default_factory=list)    # `ip netns` names we made
    owner: list[int] = field(default_factory=list)  # [pid, start] of the creating process

    processes: dict[str, list[int]] = field(default_factory=dict)  # name -> [pid, start]
    # on every resource made (module docstring); looked up per call so tests can fix it
    tag: str = field(default_factory=lambda: new_tag())
    _written: list[Path] = field(default_factory=list, compare=False, repr=False)

    @property
    def label(self) -> str:
        """What this network's interfaces, bridges and tables carry: ``testbed-net=<tag>``
        ("" for a manifest without a tag: then nothing matches it)."""
        return label_of(self.tag)

    def to_json(self) -> str:
        """The manifest as JSON text (sorted keys)."""
        data = {k: v for k, v in asdict(self).items() if not k.startswith("_")}
        return json.dumps(data, indent=1, sort_keys=True) + "\n"

    def write(self, path: Path) -> None:
        """Write the manifest to path and its trusted copy to the state directory, both
        atomically; the copies of paths written before are dropped (one current copy)."""
        text = self.to_json()
        atomic_write_text(path, text)
        copy = state_copy(path)
        atomic_write_text(copy, text)
        for old in self._written:
            if old != copy:
                old.unlink(missing_ok=True)
        self._written[:] = [copy]

    def discard(self) -> None:
        """Remove the state-directory copies (the network is gone); the output-folder
        files stay for the record."""
        for old in self._written:
            old.unlink(missing_ok=True)
        self._written.clear()

    def record_process(self, name: str, pid: int | None) -> None:
        """Note a process the network started outside its hosts (the controller) with its
        start time, so that a clean-up after a SIGKILL ends it and nothing else."""
        start = process_start_time(pid) if pid else None
        if pid and start is not None:
            self.processes[name] = [int(pid), start]

    @classmethod
    def read(cls, path: Path) -> Manifest:
        """A manifest from JSON; anything malformed raises `InputError` naming path."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            return cls.from_data(data)
        except (OSError, ValueError, TypeError) as exc:
            raise InputError(f"{path}: not a network manifest ({exc})") from None

    @classmethod
    def from_data(cls, data: object) -> Manifest:
        """Check types strictly (a manifest names what is deleted as root)."""
        def names(v: object) -> list[str]:
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise TypeError("expected a list of names")
            return list(v)

        def ints(v: object) -> dict[str, int]:
            if not isinstance(v, dict) or not all(
                    isinstance(k, str) and isinstance(x, int) and not isinstance(x, bool)
                    for k, x in v.items()):
                raise TypeError("expected a table of integers")
            return dict(v)

        if not isinstance(data, dict):
            raise TypeError("expected a JSON object")
        known = {"hosts", "netns", "switches", "interfaces", "bridges", "nft_tables",
                 "processes", "tag", "netns_handles", "owner"}
        if set(data) - known:
            raise TypeError(f"unknown keys {sorted(set(data) - known)}")
        nft = data.get("nft_tables", [])
        if not isinstance(nft, list) or not all(
                isinstance(t, list) and len(t) == 2 and all(isinstance(x, str) for x in t)
                for t in nft):
            raise TypeError("nft_tables: expected [family, name] pairs")
        procs = data.get("processes", {})
        if not isinstance(procs, dict) or not all(
                isinstance(v, list) and len(v) == 2 and all(
                    isinstance(x, int) and not isinstance(x, bool) for x in v)
                for v in procs.values()):
            raise TypeError("processes: expected name = [pid, start time]")
        tag = data.get("tag", "")
        if not isinstance(tag, str) or (tag and not TAG_RE.fullmatch(tag)):
            raise TypeError("tag: expected 8 to 32 hex digits")
        handles = names(data.get("netns_handles", []))
        if any(not tag or not re.fullmatch(rf"tb-{tag}-{NODE_NAME}", h) for h in handles):
            raise TypeError("netns_handles: expected tb-<this manifest's tag>-<node>")
        owner = data.get("owner", [])
        if not isinstance(owner, list) or len(owner) not in (0, 2) or not all(
                isinstance(x, int) and not isinstance(x, bool) for x in owner):
            raise TypeError("owner: expected [pid, start time]")
        return cls(tag=tag, hosts=ints(data.get("hosts", {})), netns=ints(data.get("netns", {})),
                   switches=ints(data.get("switches", {})),
                   interfaces=names(data.get("interfaces", [])),
                   bridges=names(data.get("bridges", [])),
                   nft_tables=[list(t) for t in nft],
                   processes={str(k): list(v) for k, v in procs.items()},
                   netns_handles=handles, owner=list(owner))


def deferred_interrupt(signums: Sequence[str | int]) -> BaseException | None:
    """The exception a signal that arrived during a clean-up raises once it is over.

    signums: the signals recorded while the clean-up ran (it is never cut short: a
    second Ctrl-C still leaves nothing behind).  SIGINT gives KeyboardInterrupt, SIGTERM
    SystemExit(143); none gives None.  The signal is therefore never swallowed.
    """
    nums = [int(s) for s in signums]
    if signal.SIGINT in nums:
        return KeyboardInterrupt()
    if nums:
        return SystemExit(128 + nums[0])
    return None


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


def handle_inode(manifest: Manifest, node: str) -> int | None:
    """The namespace inode behind the manifest's ``ip netns`` handle on node, if it has
    one (after a SIGKILL the shells are gone: the handle still names the namespace, so
    the processes the dead run left in it -- captures, flow tools -- can be ended)."""
    name = netns_handle(manifest.tag, node)
    if name not in manifest.netns_handles:
        return None
    try:
        return os.stat(NETNS_DIR / name).st_ino
    except OSError:
        return None


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

    Interfaces are deleted only if they still exist under their recorded name and carry
    the manifest's label, bridges only if OVS lists them with it (others: ``"untagged"``).
    Processes are signalled only while they are in one of the
    recorded network namespaces; fresh=False (a manifest from an earlier process)
    trusts a namespace only while its host's Mininet shell is still alive in it, or while
    the manifest's own ``ip netns`` handle holds it (same inode), so a re-used PID or
    namespace number is never signalled.  Raises `TestbedError` (after everything else)
    when a handle could not be deleted.
    """
    report: dict[str, list[str]] = {}
    trusted = {name: ino for name, ino in manifest.netns.items()
               if fresh or (is_mininet_shell(manifest.hosts[name], name)
                            and netns_inode(manifest.hosts[name]) == ino)
               or handle_inode(manifest, name) == ino}
    inodes = set(trusted.values())
    # the hosts' shells last: through them, the sockets the other processes left
    shells = [ShellRef(name, manifest.hosts[name]) for name in sorted(trusted)
              if name in manifest.hosts and is_mininet_shell(manifest.hosts[name], name)]
    stray = pids_in_netns(inodes, exclude=[s.pid for s in shells])
    if stray:
        report["processes"] = [str(p) for p in kill_pids(stray)]
    sockets = destroy_sockets(runner, shells)
    if shells:
        report.setdefault("processes", []).extend(
            str(p) for p in kill_pids([s.pid for s in shells]))
    # the namespaces' handles: after a SIGKILL the shells are gone (their stdin closed)
    # and the handle is the only way in to the sockets the dead processes left
    if not fresh:
        there = [h for h in manifest.netns_handles if os.path.lexists(NETNS_DIR / h)]
        sockets += destroy_sockets_in(runner, there)
    if sockets:
        report["sockets"] = sockets
    if manifest.netns_handles:  # (each: gone already is no error)
        runner.run(["ip", "-force", "-batch", "-"], check=False, timeout=60,
                   input="".join(f"netns delete {h}\n" for h in manifest.netns_handles))
    stuck = [h for h in manifest.netns_handles if os.path.lexists(NETNS_DIR / h)]
    for name, pid in manifest.switches.items():
        if is_mininet_shell(pid, name):
            kill_pids([pid])
            report.setdefault("processes", []).append(f"{pid} ({name})")
    label = manifest.label
    links = link_aliases(runner.run(["ip", "-j", "link", "show"], check=False, record=False,
                                    timeout=30).stdout)
    for name in manifest.interfaces:
        if name not in links:
            continue
        if label and links[name] == label:
            runner.run(["ip", "link", "del", "dev", name], check=False, timeout=30)
            report.setdefault("interfaces", []).append(name)
        else:
            report.setdefault("untagged", []).append(f"interface {name}")
    if manifest.bridges:
        res = runner.run(["ovs-vsctl", "--timeout=10", "--format=json",
                          "--columns=name,external_ids", "list", "Bridge"], check=False,
                         record=False, timeout=30)
        have = bridge_labels(res.stdout)
        for br in sorted(set(have) & set(manifest.bridges)):
            if label and have[br] == label:
                runner.run(["ovs-vsctl", "--timeout=10", "--if-exists", "del-br", br],
                           timeout=30)
                report.setdefault("bridges", []).append(br)
            else:
                report.setdefault("untagged", []).append(f"bridge {br}")
    if stuck:  # after the rest: the caller keeps the manifest for a later clean-up
        raise TestbedError(f"ip netns handles still there: {', '.join(stuck)}")
    return report


def discard_manifest(path: Path) -> None:
    """Forget the trusted copy of the manifest once written to path (if any)."""
    with contextlib.suppress(OSError, InputError):
        state_copy(path).unlink(missing_ok=True)


def has_manifest(path: Path) -> bool:
    """True when the state directory holds a trusted copy for the manifest path."""
    try:
        return state_copy(path).is_file()
    except (OSError, InputError):
        return False


def cleanup_from_manifest(path: Path, runner: CommandRunner | None = None
                          ) -> dict[str, list[str]]:
    """Finish the clean-up of a network whose process died (e.g. SIGKILL).

    path: its ``network.json`` (or ``_kept-network.json``) in the output folder; what is
    removed comes from the trusted copy in `state_dir` alone, never from that file (a
    difference, or a file without a copy, is reported under ``"untrusted"``).  The copy
    is removed afterwards.  Returns what was removed.
    """
    runner = runner or CommandRunner()
    path = Path(path)
    copy = state_copy(path)
    report: dict[str, list[str]] = {}
    if not copy.is_file():
        if path.exists():
            report["untrusted"] = [f"{path}: no copy in the testbed's state directory; "
                                   "nothing removed on its word"]
        return report
    manifest = Manifest.read(copy)
    if path.exists():
        try:
            same = Manifest.read(path) == manifest
        except InputError:
            same = False
        if not same:
            report["untrusted"] = [f"{path}: differs from the testbed's own copy; "
                                   "only the copy was used"]
    report.update(remove_dead(manifest, runner))
    copy.unlink(missing_ok=True)
    return report


def remove_dead(manifest: Manifest, runner: CommandRunner) -> dict[str, list[str]]:
    """`remove_leftovers` of a dead process's network, its recorded processes and its
    nftables tables."""
    report = remove_leftovers(manifest, runner, fresh=False)
    for name, (pid, start) in manifest.processes.items():
        if process_start_time(pid) == start:
            kill_pids([pid])
            report.setdefault("processes", []).append(f"{pid} ({name})")
    for family, name in manifest.nft_tables:
        res = runner.run(["nft", "list", "table", family, name], check=False, record=False,
                         timeout=30)
        if res.returncode != 0:
            continue  # gone already
        if manifest.label and nft_comments(res.stdout).get((family, name)) == manifest.label:
            runner.run(["nft", "delete", "table", family, name], timeout=30)
            report.setdefault("nft_tables", []).append(f"{family} {name}")
        else:
            report.setdefault("untagged", []).append(f"nft table {family} {name}")
    return report
