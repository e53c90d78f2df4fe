"""What a network could leave behind (links, namespaces, bridges, qdiscs, nftables tables,
processes), as comparable snapshots: test_cleanup.py and the fat tree of
test_fattree_controllers.py compare one taken before a network with one taken after it
stopped."""

from __future__ import annotations

import os
from pathlib import Path

from testbed.core.commands import CommandRunner
from testbed.net.cleanup import parse_link_names


def snapshot(runner: CommandRunner) -> dict[str, object]:
    """What a network could leave behind, as comparable values."""
    procs = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if cmd:  # kernel threads have none
                procs.add((int(entry), cmd.split(b"\0")[0].decode(errors="replace")))
    nft = runner.run(["nft", "list", "tables"], check=False).stdout
    return {
        "links": sorted(parse_link_names(runner.run(["ip", "-o", "link", "show"]).stdout)),
        "netns": runner.run(["ip", "netns", "list"]).stdout,
        "bridges": runner.run(["ovs-vsctl", "list-br"]).stdout,
        "qdiscs": runner.run(["tc", "qdisc", "show"]).stdout,
        "nft": nft,
        "procs": procs,
    }


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None  # gone
    return int(stat.rsplit(")", 1)[1].split()[1])


def _left_behind(before: dict, after: dict) -> set[tuple[int, str]]:
    """New processes that could be ours: not the test itself, still alive, and not the
    child of a daemon that was already running (udevd forks workers for every veth the
    network creates; they exit on their own and were never the testbed's)."""
    me = os.getpid()
    daemons = {pid for pid, _ in before["procs"]} - {1, me}
    left = set()
    for pid, name in after["procs"] - before["procs"]:
        ppid = _ppid(pid)
        if pid != me and ppid is not None and ppid not in daemons:
            left.add((pid, name))
    return left


def assert_same(before: dict, after: dict) -> None:
    for key in ("links", "netns", "bridges", "qdiscs", "nft"):
        assert after[key] == before[key], f"{key} differ"
    new = _left_behind(before, after)
    assert not new, f"processes left behind: {sorted(new)}"
