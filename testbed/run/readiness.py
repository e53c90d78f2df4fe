"""A run's clock starts only when the network is ready and the machine is quiet.

Before a run's time origin (``t0``): every address pair the run's flows, subflows and
pings will use is pinged once, so neighbour (ARP) entries exist at both ends and Open
vSwitch has its datapath flows for the pair (a first packet otherwise waits for an ARP
round trip, which crosses the shaped links, and for an upcall to ovs-vswitchd: the
first ping of a run read 88.9 ms on a 30 ms path without this); then the CPUs are
sampled until they are quiet, so set-up work (program starts, OVS, the controller
programming switches) does not run into the measured traffic.  docs/fidelity.md has
the measurements.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.net.monitor import parse_proc_stat
from testbed.plan.flowspec import FlowSpec
from testbed.plan.pings import PingTarget

if TYPE_CHECKING:
    from testbed.core.commands import CommandRunner
    from testbed.net.network import Network

QUIET_BUSY = 0.5        # CPUs busier than this are not quiet
QUIET_SAMPLE_S = 0.25   # one /proc/stat sample this long
QUIET_NEED = 2          # consecutive quiet samples
QUIET_LIMIT_S = 8.0     # wait at most this long (the run then starts and says so)

# pings each (bind, destination) pair once: "-" binds nothing; prints "unreachable
# <bind> <dst>" for a pair that did not answer (the run still starts: its flows will
# say what is wrong)
WARM_SCRIPT = ('while [ $# -gt 1 ]; do b=$1; d=$2; shift 2; if [ "$b" = - ]; then '
               'ping -n -q -c 1 -W 2 "$d"; else ping -n -q -c 1 -W 2 -I "$b" "$d"; fi '
               '>/dev/null 2>&1 || echo "unreachable $b $d"; done')


def warm_targets(flows: Iterable[FlowSpec], pings: Iterable[PingTarget],
                 path_addrs: dict[tuple[str, str], str], server_addr: str | None
                 ) -> dict[str, list[tuple[str | None, str]]]:
    """Per source host, the (source address or None, destination address) pairs to warm.

    flows: resolved `FlowSpec`s (src, bind_addr, dst_addr); pings: the run's pings
    (host, bind, dst_addr); path_addrs: (host, path) -> address on a multipath
    topology: MPTCP subflows run between the client's address on every path and the
    server, in either direction, so each of those pairs is warmed too; server_addr: the
    server's primary address there.
    """
    out: dict[str, list[tuple[str | None, str]]] = {}

    def add(host: str, bind: str | None, dst: str | None) -> None:
        if dst and (bind, dst) not in out.setdefault(host, []):
            out[host].append((bind, dst))

    for f in flows:
        add(f.src, f.bind_addr, f.dst_addr)
    for p in pings:
        add(p.host, p.bind, p.dst_addr)
    if server_addr:
        for (h, path), addr in sorted(path_addrs.items()):
            if h == "client":
                add("client", addr, path_addrs.get(("server", path)) or server_addr)
                add("server", None, addr)
    return out


def warm_command(pairs: Iterable[tuple[str | None, str]]) -> list[str]:
    """argv that pings each pair once (run it in the source host's namespace).
    Raises ValueError for anything that is not an IP address."""
    args: list[str] = []
    for bind, dst in pairs:
        for a in (bind, dst):
            if a is not None:
                ipaddress.ip_address(a)
        args += [bind or "-", dst]
    return ["sh", "-c", WARM_SCRIPT, "warm", *args]


def parse_unreachable(text: str) -> list[str]:
    """``unreachable <bind> <dst>`` lines -> ["<bind> -> <dst>", ...]."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "unreachable":
            out.append(f"{parts[2]} from {parts[1]}" if parts[1] != "-" else parts[2])
    return out


def wait_quiet(read: Callable[[], str] | None = None, busy: float = QUIET_BUSY,
               sample_s: float = QUIET_SAMPLE_S, need: int = QUIET_NEED,
               limit_s: float = QUIET_LIMIT_S, sleep: Callable[[float], None] = time.sleep
               ) -> dict[str, Any]:
    """Sample the CPUs until `need` consecutive samples are at most `busy` busy, at most
    `limit_s`; return {"waited_s", "quiet", "busy_last"} for metadata.json."""
    read = read or (lambda: Path("/proc/stat").read_text())
    t_begin = time.time()
    prev = parse_proc_stat(read())
    streak, last = 0, None
    while True:
        sleep(sample_s)
        cur = parse_proc_stat(read())
        if cur[1] > prev[1]:
            last = (cur[0] - prev[0]) / (cur[1] - prev[1])
            streak = streak + 1 if last <= busy else 0
        prev = cur
        waited = time.time() - t_begin
        if streak >= need or waited >= limit_s:
            return {"waited_s": round(waited, 3), "quiet": streak >= need,
                    "busy_last": None if last is None else round(last, 3)}


def warm_up(runner: CommandRunner, net: Network, targets: dict[str, list[tuple[str | None, str]]]
            ) -> dict[str, Any]:
    """Ping every pair of targets once from its source host (one program start per
    host, hosts in parallel); return what metadata.json keeps under ``readiness``."""
    from testbed.core.commands import in_parallel

    def one(item: tuple[str, list[tuple[str | None, str]]]) -> list[str]:
        host, pairs = item
        res = runner.run(warm_command(pairs), host=net.host(host),
                         timeout=10.0 + 3.0 * len(pairs), check=False)
        return [f"{host}: {u}" for u in parse_unreachable(res.stdout)]

    t = time.time()
    items = sorted((h, p) for h, p in targets.items() if p)
    unreachable = [u for found in in_parallel(one, items) for u in found]
    return {"warm_pairs": sum(len(p) for _h, p in items), "warm_s": round(time.time() - t, 3),
            "unreachable": unreachable}
