"""A network's namespaces from outside them: the ``ip netns`` handles a network keeps on its
hosts' namespaces (`netns_handle`), and the TCP sockets a run's processes leave there
(`live_sockets`, `destroy_sockets` through the hosts' shells, `destroy_sockets_in` through
the handles, after a SIGKILL).  Used by `testbed.net.cleanup` and `testbed.net.teardown`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.core.commands import CommandRunner, in_parallel
from testbed.core.errors import TestbedError
from testbed.core.statedir import process_start_time

NETNS_DIR = Path("/run/netns")  # where `ip netns` keeps its handles (bind mounts)
NODE_NAME = r"[A-Za-z0-9_.-]{1,64}"  # the nodes whose namespace gets a handle


def this_process() -> list[int]:
    """[pid, start time] of this process (a manifest's ``owner``); [] if unreadable."""
    start = process_start_time(os.getpid())
    return [os.getpid(), start] if start is not None else []



def netns_handle(tag: str, node: str) -> str:
    """The ``ip netns`` name under which a network with tag holds node's namespace."""
    return f"tb-{tag}-{node}"


@dataclass(frozen=True)
class ShellRef:
    """A namespace to run a command in: its node's name and its Mininet shell's PID."""

    name: str
    pid: int


# every TCP socket of a namespace, listening and orphaned ones included (an orphan has no
# process left to signal; TIME_WAIT entries hold nothing and are skipped by the kernel)
DESTROY_SOCKETS = ["ss", "-K", "-H", "-t", "-a"]
DESTROY_MPTCP = ["ss", "-K", "-H", "-M", "-a"]


TIME_WAIT = "06"  # /proc/net/tcp's `st` column


def live_sockets(pid: int, proc: Path = Path("/proc")) -> int:
    """TCP sockets (IPv4 and IPv6) in pid's network namespace other than TIME_WAIT ones,
    from ``/proc/<pid>/net/tcp*`` (read from here: no program starts); 0 if pid is gone."""
    n = 0
    for name in ("tcp", "tcp6"):
        try:
            with open(proc / str(pid) / "net" / name) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        n += sum(1 for row in rows if len(row.split()) > 3 and row.split()[3] != TIME_WAIT)
    return n


def destroy_sockets(runner: CommandRunner, shells: Sequence[ShellRef]) -> list[str]:
    """Destroy (``ss -K``: SOCK_DESTROY, an RST to the peer) the TCP sockets left in each
    namespace once its processes are gone; returns ``"<node>: <n>"`` for each that had
    some.  What holds them otherwise: a connection whose process died with data unsent
    keeps retrying for minutes, and with it the congestion control it uses (a BPF one
    stays in the kernel until then, docs/coupled_cc.md) and, after a kept network's run,
    its packets reach the next run (docs/fidelity.md, section 2b).  MPTCP subflows are TCP
    sockets and go with them.  ``ss`` runs only where `live_sockets` finds some (after a
    run that closed its connections: nowhere).  Never raises: a kernel without
    CONFIG_INET_DIAG_DESTROY leaves them, as before."""
    def one(ref: ShellRef) -> str | None:
        if not live_sockets(ref.pid):
            return None
        try:
            res = runner.run(DESTROY_SOCKETS, host=ref, check=False, timeout=30)
        except TestbedError:
            return None
        n = len([line for line in res.stdout.splitlines() if line.strip()])
        return f"{ref.name}: {n}" if n else None
    return [r for r in in_parallel(one, list(shells)) if r]


# a namespace's default congestion control holds a reference on it (for a BPF one, on
# its struct_ops map) until the namespace goes or the default changes; Reno is built in
RESET_DEFAULT_CC = ["sysctl", "-q", "-w", "net.ipv4.tcp_congestion_control=reno"]


def destroy_sockets_in(runner: CommandRunner, handles: Sequence[str]) -> list[str]:
    """Through ``ip netns`` handles (namespaces no process is left in): set the default
    congestion control back to Reno, then `destroy_sockets`; returns ``"<handle>: <n>"``
    for each that had sockets.  After a SIGKILL a namespace may outlive its processes
    (an MPTCP connection, which ``ss -K`` cannot end, holds it for a while), and with it
    the BPF control a run made its default."""
    def one(handle: str) -> str | None:
        try:
            runner.run(["ip", "netns", "exec", handle, *RESET_DEFAULT_CC], check=False,
                       timeout=30)
            res = runner.run(["ip", "netns", "exec", handle, *DESTROY_SOCKETS], check=False,
                             timeout=30)
            # MPTCP connections: ended too where the kernel can (its MPTCP diag may not
            # support SOCK_DESTROY), then counted: one left keeps its subflows' control
            runner.run(["ip", "netns", "exec", handle, *DESTROY_MPTCP], check=False,
                       timeout=30)
            left = runner.run(["ip", "netns", "exec", handle, "ss", "-H", "-M", "-a"],
                              check=False, timeout=30, record=False)
        except TestbedError:
            return None
        mptcp = len([line for line in left.stdout.splitlines() if line.strip()])
        n = len([line for line in res.stdout.splitlines() if line.strip()])
        if not n and not mptcp:
            return None
        return f"{handle}: {n}" + (f", {mptcp} MPTCP connection(s) left" if mptcp else "")
    return [r for r in in_parallel(one, list(handles)) if r]
