"""Receive packet steering (RPS) on every interface the testbed creates.

Why: on more than one CPU the emulator reorders packets by itself.  A veth transmit
hands the packet to the peer's receive path on the CPU that happens to transmit: the
sender's CPU when a qdisc dequeues in the sender's context, or whichever CPU runs the
netem/htb watchdog timer when the qdisc dequeues later.  Each CPU has its own backlog
queue, so two packets of one flow can land on different CPUs' backlogs and leave them
in either order.  With RPS, the receiving veth puts every packet on the backlog of the
CPU its flow hash selects, so one flow's packets always share one backlog and stay in
order, while different flows still spread over all CPUs.  docs/fidelity.md has the
measurements (before / after, and the cost).

Linux 6.1 (Debian 12's kernel) has no ``net.core.rps_default_mask`` (it arrived in 6.3),
so each interface's ``queues/rx-*/rps_cpus`` is written when the network is set up, in
the namespace that holds it (a Mininet host mounts its own sysfs, so ``/sys/class/net``
inside it shows its own interfaces).  A mask is never written on an interface the
testbed did not create: the names come from the topology.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

# writes the mask ($1) to every receive queue of the named interfaces; one program
# start per namespace (echo is a shell builtin); fails on the first write that fails
RPS_SCRIPT = ('m=$1; shift; for i in "$@"; do for f in /sys/class/net/"$i"/queues/rx-*/'
              'rps_cpus; do echo "$m" > "$f" || exit 1; done; done')
_NAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")


def parse_cpu_list(text: str) -> list[int]:
    """CPUs of a kernel CPU list such as ``/sys/devices/system/cpu/online`` ("0-3,6")."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return sorted(set(cpus))


def cpu_mask(cpus: Iterable[int]) -> str:
    """The kernel's bitmap text for a set of CPUs: hex, 32-bit groups joined by commas,
    most significant first (``[0, 1]`` -> ``"3"``, ``[0, 33]`` -> ``"2,00000001"``)."""
    bits = 0
    for c in cpus:
        if c < 0:
            raise ValueError(f"negative CPU number {c}")
        bits |= 1 << c
    if not bits:
        raise ValueError("no CPU in the mask")
    groups: list[str] = []
    while bits:
        groups.append(f"{bits & 0xFFFFFFFF:08x}")
        bits >>= 32
    groups.reverse()
    groups[0] = groups[0].lstrip("0") or "0"
    return ",".join(groups)


def online_cpus(path: str = "/sys/devices/system/cpu/online") -> list[int]:
    """The CPUs the kernel has online (the machine's, or the VM's inside `testbed vm`)."""
    with open(path, encoding="ascii") as f:
        return parse_cpu_list(f.read())


def rps_command(interfaces: Sequence[str], mask: str) -> list[str]:
    """argv that sets ``rps_cpus`` of every receive queue of interfaces to mask; run it in
    the namespace that holds them.  Raises ValueError for a name that is not a plain
    interface name (they come from the topology, never from a shell)."""
    for name in interfaces:
        if not _NAME.fullmatch(name) or name in (".", ".."):
            raise ValueError(f"not an interface name: {name!r}")
    if not re.fullmatch(r"[0-9a-f]+(,[0-9a-f]{8})*", mask):
        raise ValueError(f"not a CPU mask: {mask!r}")
    return ["sh", "-c", RPS_SCRIPT, "rps", mask, *interfaces]


def read_rps_command(interfaces: Sequence[str]) -> list[str]:
    """argv that prints ``<interface> <mask>`` for the first receive queue of each."""
    for name in interfaces:
        if not _NAME.fullmatch(name):
            raise ValueError(f"not an interface name: {name!r}")
    script = ('for i in "$@"; do read -r m < /sys/class/net/"$i"/queues/rx-0/rps_cpus '
              '&& echo "$i $m"; done')
    return ["sh", "-c", script, "rps", *interfaces]


def parse_rps_masks(text: str) -> dict[str, int]:
    """``<interface> <mask>`` lines -> {interface: mask as an int} (commas dropped)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            out[parts[0]] = int(parts[1].replace(",", ""), 16)
    return out
