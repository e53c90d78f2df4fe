"""What a run leaves in a host's network namespace, and putting it back (`HostState`).

A kept network (`testbed.run.reuse`) may serve runs with different transports only if each
run finds its hosts as a fresh network would have them.  A network that takes a
*baseline* reads every host's state right after it is built; between two runs,
`restore_commands` turns what a run changed back and `differences` checks the result:

* the TCP/MPTCP sysctls (`SYSCTL_PATTERN`, writable ones only): congestion control,
  buffers, ``net.mptcp.*``, ``rp_filter``;
* the MPTCP path manager: endpoints (flushed) and limits;
* policy-routing rules and routes (in any table) that the run added, and routes whose
  metrics it changed (a transport profile's ``advmss``/``initcwnd``: replaced by the
  baseline's);
* addresses the run added (an MPTCP alias for a second subflow on one path): deleted,
  which also removes the ``local`` and ``broadcast`` routes the kernel made for them.
  Deleting only those routes would leave an address packets to it never reach (a later
  run's join subflow from it never got its SYN-ACK).

Anything a run removed from the baseline (a rule or route of the topology's own
routing) is not recreated: `differences` reports it, and the network is then stopped
rather than reused.  Everything here is pure except `read_state`/`restore`, which run
one shell per host through the runner; `HostBaseline` holds a network's baseline and
puts every host back to it.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from testbed.core.batch import batch_text
from testbed.core.commands import CommandRunner, in_parallel
from testbed.core.errors import RunError
from testbed.core.transcript import Namespaced
from testbed.spec.profile import without_route_metrics

SYSCTL_PATTERN = r"^net\.(ipv4\.tcp_|mptcp\.|core\.(r|w)mem|ipv4\.conf\.all\.rp_filter)"
# where those live under /proc/sys (reading only them: `sysctl -a` reads every sysctl,
# about a second per host under software emulation)
SYSCTL_GLOBS = ("net/ipv4/tcp_*", "net/mptcp/*", "net/core/rmem_*", "net/core/wmem_*",
                "net/ipv4/conf/all/rp_filter")
# global, not per namespace, and changed by the testbed itself between runs: a module it
# loads is added to the allowed list (`testbed.host.transport.ensure_cc`), and a registered
# coupled control (non-restricted) is listed there while registered; not a run's leftover
GLOBAL_SYSCTLS = frozenset({"net.ipv4.tcp_allowed_congestion_control"})
# the metrics ``ip route`` prints after a route (each followed by a value, or ``lock``
# and a value)
ROUTE_METRIC_WORDS = frozenset({"mtu", "advmss", "window", "rtt", "rttvar", "ssthresh",
                                "cwnd", "initcwnd", "initrwnd", "reordering", "hoplimit",
                                "features", "quickack", "congctl", "rto_min",
                                "fastopen_no_cookie"})
_SECTIONS = ("limits", "endpoints", "rules", "routes", "addresses")
_MARK = "@@testbed-hoststate "
_RULE = re.compile(r"^(\d+):\s")


def parse_sysctl(text: str) -> dict[str, str]:
    """``key = value`` lines (``sysctl`` output) -> dict."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        if sep:
            out[key.strip()] = value.strip()
    return out


def sysctl_keys(root: Path = Path("/proc/sys"), writable: bool = False) -> list[str]:
    """The names of the sysctls `SYSCTL_PATTERN` selects, found without reading them (the
    same names exist in every network namespace; one missing in a host is skipped).
    writable: only those root may write (read-only lists such as the available
    congestion controls change when a module loads, not because of a run).  The global
    `GLOBAL_SYSCTLS` are left out."""
    keys = set()
    for g in SYSCTL_GLOBS:
        for p in root.glob(g):
            if writable:
                try:
                    if not p.stat().st_mode & stat.S_IWUSR:
                        continue
                except OSError:
                    continue
            keys.add(".".join(p.relative_to(root).parts))
    return sorted(k for k in keys if re.match(SYSCTL_PATTERN, k) and k not in GLOBAL_SYSCTLS)


@dataclass
class HostState:
    """A host's transport-relevant state, as read by `read_state`."""

    sysctls: dict[str, str] = field(default_factory=dict)
    limits: dict[str, str] = field(default_factory=dict)   # ``ip mptcp limits show``
    endpoints: list[str] = field(default_factory=list)     # ``ip mptcp endpoint show``
    rules: list[str] = field(default_factory=list)         # ``ip rule show``
    routes: list[str] = field(default_factory=list)        # ``ip route show table all``
    addresses: list[str] = field(default_factory=list)     # ``<dev> <family> <addr/len>``


# the ip(8) reads of a host's state, in one ``ip -batch`` (a program start costs about
# 0.1 s under software emulation: this is 4 of them fewer at every read), each followed by
# ``link show dev lo``, whose first line (``1: lo: <...>``, the loopback device every
# namespace has) no read prints, to tell where its output ends
_IP_READS = ("limits", "mptcp limits show"), ("endpoints", "mptcp endpoint show"), \
    ("rules", "rule show"), ("routes", "route show table all")
_LO = re.compile(r"^\d+: lo: <")


def state_argv(keys: list[str]) -> list[str]:
    """One ``sh -c`` that prints a host's state in sections (keys: sysctl names, plain
    tokens from /proc/sys, passed as arguments, never spliced into the script)."""
    batch = "".join(f"{cmd}\nlink show dev lo\n" for _name, cmd in _IP_READS)
    script = (f"sysctl -e \"$@\"; echo '{_MARK}ip'; ip -force -batch - <<'END'\n{batch}END\n"
              f"echo '{_MARK}addresses'; ip -o addr show")
    return ["sh", "-c", script, "testbed-hoststate", *keys]


def _split_ip(lines: list[str]) -> dict[str, list[str]]:
    """The ``ip -batch`` section of `state_argv` output -> its reads' lines by name."""
    out: dict[str, list[str]] = {name: [] for name, _cmd in _IP_READS}
    names = iter(out)
    current = out[next(names)]
    for line in lines:
        if _LO.match(line):
            current = out.get(next(names, ""), [])
        elif not line.startswith("link/loopback"):
            current.append(line)
    return out


def parse_addresses(lines: list[str]) -> list[str]:
    """``ip -o addr show`` lines -> ``<dev> <family> <addr/len>`` (pure; the lifetimes and
    flags that change by themselves are left out)."""
    out = []
    for line in lines:
        w = line.split()
        if len(w) >= 4 and w[2] in ("inet", "inet6"):
            out.append(f"{w[1].split('@')[0]} {w[2]} {w[3]}")
    return out


def parse_state(text: str) -> HostState:
    """`state_argv` output -> `HostState` (pure)."""
    parts: dict[str, list[str]] = {"sysctls": []}
    current = "sysctls"
    for line in text.splitlines():
        if line.startswith(_MARK):
            current = line[len(_MARK):].strip()
            parts[current] = []
            continue
        if line.strip():
            parts.setdefault(current, []).append(" ".join(line.split()))
    if "ip" in parts:  # the ip(8) reads' one batch, split into their sections
        parts.update(_split_ip(parts.pop("ip")))
    limit_words = " ".join(parts.get("limits", [])).split()
    # "linkdown" says the interface has no carrier (a schedule took its link down):
    # link state, which `Network.begin_run` restores, not a route the run added
    routes = [" ".join(w for w in r.split() if w != "linkdown")
              for r in parts.get("routes", [])]
    return HostState(
        addresses=parse_addresses(parts.get("addresses", [])),
        sysctls=parse_sysctl("\n".join(parts["sysctls"])),
        limits=dict(zip(limit_words[::2], limit_words[1::2], strict=False)),
        endpoints=parts.get("endpoints", []), rules=parts.get("rules", []),
        routes=routes)


def restore_commands(base: HostState, now: HostState) -> list[list[str]]:
    """The commands that take a host from now back to base, as far as that is possible
    without recreating anything (pure): changed sysctls written back, endpoints flushed,
    limits reset, addresses, rules and routes that base lacks deleted."""
    cmds: list[list[str]] = []
    changed = [f"{k}={v}" for k, v in sorted(base.sysctls.items())
               if now.sysctls.get(k) is not None and now.sysctls[k] != v]
    if changed:
        cmds.append(["sysctl", "-q", "-w", *changed])
    if now.endpoints != base.endpoints:
        cmds.append(["ip", "mptcp", "endpoint", "flush"])
    if now.limits != base.limits and base.limits:
        cmds.append(["ip", "mptcp", "limits", "set",
                     *(w for k, v in sorted(base.limits.items()) for w in (k, v))])
    gone = set()
    for addr in now.addresses:
        if addr not in base.addresses:  # before the routes: its own go with it
            dev, _family, cidr = addr.split()
            cmds.append(["ip", "addr", "del", cidr, "dev", dev])
            gone.add(cidr.split("/")[0])
    for rule in now.rules:
        m = _RULE.match(rule)
        if rule not in base.rules and m:
            # by its whole selector: rules may share a priority (an MPTCP alias address's
            # rule has its interface's), and ``del pref N`` alone takes the first of them
            cmds.append(["ip", "rule", "del", "pref", m.group(1), *rule[m.end():].split()])
    # a route the run only changed in place (a profile's ``advmss``/``initcwnd``) is put
    # back as it was; deleting it would lose the topology's route
    changed_from = {_route_key(r): r for r in base.routes if r not in now.routes}
    for route in now.routes:
        words = route.split()
        if words[0] in ("local", "broadcast") and gone & set(words):
            continue  # the kernel's own route for an address deleted above
        if route in base.routes:
            continue
        was = changed_from.get(_route_key(route))
        if was is not None:
            cmds.append(["ip", "route", "replace", *was.split()])
        else:
            cmds.append(["ip", "route", "del", *words])
    return cmds


def _route_key(route: str) -> tuple[str, ...]:
    """A route's words without its metrics (``advmss 1000``, ``initcwnd lock 2``): two
    routes with one key are one route whose metrics changed."""
    return tuple(without_route_metrics(route.split(), ROUTE_METRIC_WORDS))


def differences(base: HostState, now: HostState) -> list[str]:
    """What still differs between a host's baseline and its state now (pure)."""
    out = [f"sysctl {k} = {now.sysctls.get(k)!r}, was {v!r}"
           for k, v in sorted(base.sysctls.items()) if now.sysctls.get(k) != v]
    if now.limits != base.limits:
        out.append(f"MPTCP limits {now.limits}, were {base.limits}")
    if now.endpoints != base.endpoints:
        out.append(f"MPTCP endpoints {now.endpoints}, were {base.endpoints}")
    for name, one in (("rules", "rule"), ("routes", "route"), ("addresses", "address")):
        b, n = getattr(base, name), getattr(now, name)
        out += [f"{one} added: {x}" for x in n if x not in b]
        out += [f"{one} gone: {x}" for x in b if x not in n]
    return out


def read_state(runner: CommandRunner, host: Namespaced, keys: list[str]) -> HostState:
    """A host's state now (one shell in its namespaces)."""
    return parse_state(runner.run(state_argv(keys), host=host, record=False,
                                  check=False).stdout)


def restore(runner: CommandRunner, host: Namespaced, base: HostState,
            keys: list[str]) -> list[str]:
    """Put a host back to base; return what still differs afterwards (empty: restored).
    Every command goes into the transcript; a refused one is reported, not raised.

    At most four processes per host (each start costs about 0.3 s under software
    emulation): the state, the sysctls, every ``ip`` command in one ``ip -force -batch``
    (it goes on past a refused line), and the state again -- only the first when nothing
    changed."""
    now = read_state(runner, host, keys)
    cmds = restore_commands(base, now)
    if not cmds:
        return differences(base, now)
    for argv in cmds:
        if argv[0] != "ip":
            runner.run(argv, host=host, check=False)
    ip = [argv for argv in cmds if argv[0] == "ip"]
    if ip:
        runner.run(["ip", "-force", "-batch", "-"], host=host, check=False,
                   input=batch_text(ip))
    return differences(base, read_state(runner, host, keys))


def baseline(runner: CommandRunner, hosts: Sequence[Namespaced], keys: list[str]
             ) -> dict[str, HostState]:
    """Every host's state now, by host name (a few hosts at a time)."""
    states = in_parallel(lambda h: read_state(runner, h, keys), hosts)
    return {h.name: s for h, s in zip(hosts, states, strict=True)}


class HostBaseline:
    """Every host's state right after a network started, to put back between runs.

    states: by host name (None until `take`); keys: the sysctls it covers.
    """

    def __init__(self) -> None:
        self.states: dict[str, HostState] | None = None
        self.keys: list[str] = []

    def take(self, runner: CommandRunner, hosts: Sequence[Namespaced]) -> None:
        """Read every host's state now (the writable `SYSCTL_PATTERN` sysctls and more)."""
        self.keys = sysctl_keys(writable=True)
        self.states = baseline(runner, hosts, self.keys)

    def restore(self, runner: CommandRunner, hosts: Sequence[Namespaced]) -> None:
        """Every host's transport state back to the baseline; RunError naming what could
        not be restored (the network must then not serve another run)."""
        states = self.states
        assert states is not None
        left = in_parallel(lambda h: restore(runner, h, states[h.name], self.keys), hosts)
        problems = [f"{h.name}: {d}" for h, diff in zip(hosts, left, strict=True)
                    for d in diff]
        if problems:
            raise RunError("host state differs from the fresh network's: "
                           + "; ".join(problems[:5]))


def cold_cache_commands(hosts: Sequence[Namespaced]) -> dict[str, list[list[str]]]:
    """The ``ip`` commands that empty each host's TCP metrics and neighbour caches, as on
    a new network (a cached ssthresh or RTT would carry one run's outcome into the
    next), by host name."""
    return {h.name: [["ip", "tcp_metrics", "flush", "all"], ["ip", "neigh", "flush", "all"]]
            for h in hosts}
