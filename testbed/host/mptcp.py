"""Host transport configuration: TCP settings plus the upstream MPTCP path manager.

``configure_host`` is what the runner calls once per host after the network is up::

    from testbed.host.mptcp import configure_host, host_interfaces
    from testbed.plan.transport import TransportSettings
    ts = TransportSettings.from_spec(spec.transport)        # the validated [transport]
    ensure_cc(runner, ts.cc)                                 # before the network (fail early)
    applied = configure_host(runner, net.host("client"), ts,
                             host_interfaces(net.host("client")), role="client",
                             peer_multihomed=topo.server_multihomed)
    applied = configure_host(runner, net.host("server"), ts,
                             host_interfaces(net.host("server")), role="server")

It returns a dict of what was applied (sysctls read back, limits, endpoints, rules,
addresses) for ``metadata.json``.  Everything happens inside the host's namespace, so
it disappears with the network; only ``modprobe tcp_<cc>`` (root namespace) persists.

MPTCP recipe on the stock 6.1 kernel (verified in the VM):

* ``ip mptcp limits set subflows N add_addr_accepted N`` on both ends.  The client's
  N defaults to the number of extra subflows wanted (``paths x subflows_per_path - 1``,
  or ``transport.subflows``); the server's to 8 (it only bounds what it accepts).
* Single-homed server (the default `MultiHomedTopo`): the *client* gets one
  ``ip mptcp endpoint add <addr> dev <intf> subflow`` per extra interface; the kernel
  opens a subflow from each endpoint address to the server's address.  Each source
  address needs its own routing table (``ip rule add from <addr> table T`` plus a route
  in T) or the subflow leaves through the main table's interface; ``rp_filter=2``.
  Rules are added only if missing, so this composes with the topology's own
  ``setup_commands``.
* Multi-homed server: the *server* gets ``signal`` endpoints for its extra addresses
  and the client only accepts them (``add_addr_accepted``); the client then opens one
  subflow to each announced address, from the address routing picks (the connected
  subnet's), i.e. one subflow per interface pair.
* More than one subflow over one interface pair (``subflows_per_path = k``, P0 4.3):
  the in-kernel path manager never opens two subflows with the same address pair and
  has no per-endpoint subflow count on 6.1, and ``fullmesh`` only multiplies local by
  remote addresses.  So the testbed adds ``k - 1`` extra addresses on each interface
  of the side that creates them (client ``subflow`` endpoints, or server ``signal``
  endpoints when the server is multi-homed), in the same subnet, at offsets of
  1/(k_max+1) of the subnet (`alias_address`: 10.0.1.1/24 -> 10.0.1.52, .103, .154),
  each with a policy rule to that interface's table.
* Re-applying is safe: endpoints are flushed first, addresses use ``ip addr replace``.
* ``net.mptcp.scheduler`` exists from 6.6; on older kernels a scheduler other than
  ``default`` raises `UnsupportedError`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.core.commands import CommandRunner
from testbed.core.errors import CommandError, InputError, UnsupportedError
from testbed.core.transcript import Namespaced
from testbed.host.transport import apply_route_metrics, apply_tcp, sysctl_write_argv
from testbed.plan.transport import MAX_PER_PATH, MAX_SUBFLOWS, TransportSettings

TABLE_BASE = 100            # same plan as topologies.multipath: path i -> table 101 + i
SCHEDULER_SYSCTL = "net.mptcp.scheduler"
AVAILABLE_SCHEDULERS = "net.mptcp.available_schedulers"


@dataclass(frozen=True)
class HostInterface:
    """One interface of a host, as MPTCP and policy routing need it.

    name: ``client-eth1``; addr: its IPv4 address; prefixlen: subnet prefix length;
    table: policy-routing table for its addresses; gateway: next hop on that path
    (None: the subnet is directly connected to the peer).
    """

    name: str
    addr: str
    prefixlen: int = 24
    table: int | None = None
    gateway: str | None = None

    @property
    def subnet(self) -> str:
        return str(ipaddress.ip_interface(f"{self.addr}/{self.prefixlen}").network)


@dataclass(frozen=True)
class Step:
    """One command of a plan: argv, and what it is for (``limits``, ``endpoint``, ...)."""

    argv: tuple[str, ...]
    what: str


# -- pure builders --------------------------------------------------------------------
def limits_argv(subflows: int, add_addr_accepted: int) -> list[str]:
    """``ip mptcp limits set`` as argv."""
    return ["ip", "mptcp", "limits", "set", "subflows", str(subflows),
            "add_addr_accepted", str(add_addr_accepted)]


def endpoint_argv(addr: str, intf: str, kind: str) -> list[str]:
    """``ip mptcp endpoint add <addr> dev <intf> <kind>``; kind: subflow | signal | backup
    | fullmesh or a combination separated by spaces (e.g. ``"subflow backup"``)."""
    flags = kind.split()
    bad = [f for f in flags if f not in ("subflow", "signal", "backup", "fullmesh")]
    if bad or not flags:
        raise InputError(f"MPTCP endpoint flags {kind!r}: use subflow, signal, backup, "
                         "fullmesh")
    return ["ip", "mptcp", "endpoint", "add", addr, "dev", intf, *flags]


def addr_add_argv(addr: str, prefixlen: int, intf: str) -> list[str]:
    """``ip addr replace <addr>/<len> dev <intf>`` (an extra address for another subflow)."""
    return ["ip", "addr", "replace", f"{addr}/{prefixlen}", "dev", intf]


def rule_argv(addr: str, table: int) -> list[str]:
    """``ip rule add from <addr> table T priority T``."""
    return ["ip", "rule", "add", "from", addr, "table", str(table), "priority", str(table)]


def table_route_argvs(iface: HostInterface, table: int) -> list[list[str]]:
    """Routes of the interface's table: its subnet, and a default via its gateway."""
    cmds = [["ip", "route", "replace", iface.subnet, "dev", iface.name, "scope", "link",
             "table", str(table)]]
    if iface.gateway:
        cmds.append(["ip", "route", "replace", "default", "via", iface.gateway, "dev",
                     iface.name, "table", str(table)])
    return cmds


def alias_address(addr: str, prefixlen: int, j: int, per_path_max: int = MAX_PER_PATH) -> str:
    """The j-th extra address (j >= 1) of an interface, for another subflow on its path.

    Placed at offset ``j * size // (per_path_max + 1)`` from the interface's own
    address, wrapping inside the subnet (10.0.1.1/24, j=1 -> 10.0.1.52).
    """
    net = ipaddress.ip_interface(f"{addr}/{prefixlen}").network
    size = net.num_addresses
    if size < 2 * (per_path_max + 1):
        raise UnsupportedError(f"subnet {net} of {addr} is too small for extra subflow "
                               "addresses; use a /27 or larger")
    base = int(ipaddress.ip_address(addr)) - int(net.network_address)
    host = (base + j * (size // (per_path_max + 1))) % size
    if host == 0:  # never the network or broadcast address
        host = 1
    elif host == size - 1:
        host = size - 2
    return str(ipaddress.ip_address(int(net.network_address) + host))


def parse_rules(text: str) -> set[tuple[str, str]]:
    """(source, table) pairs from ``ip rule show`` output."""
    out = set()
    for line in text.splitlines():
        m = re.search(r"\bfrom (\S+) lookup (\S+)", line)
        if m:
            out.add((m.group(1), m.group(2)))
    return out


def parse_endpoints(text: str) -> list[dict[str, Any]]:
    """``ip mptcp endpoint show`` -> [{addr, id, flags, dev}]."""
    out = []
    for line in text.splitlines():
        tok = line.split()
        if not tok:
            continue
        ep: dict[str, Any] = {"addr": tok[0], "id": None, "flags": [], "dev": None}
        i = 1
        while i < len(tok):
            if tok[i] in ("id", "dev", "port") and i + 1 < len(tok):
                ep[tok[i]] = int(tok[i + 1]) if tok[i] in ("id", "port") else tok[i + 1]
                i += 2
            else:
                ep["flags"].append(tok[i])
                i += 1
        out.append(ep)
    return out


def parse_limits(text: str) -> dict[str, int]:
    """``ip mptcp limits show`` -> {subflows, add_addr_accepted}."""
    tok = text.split()
    return {k: int(v) for k, v in zip(tok[::2], tok[1::2], strict=False) if v.isdigit()}


def interface_tables(interfaces: Sequence[HostInterface]) -> list[int]:
    """The routing table of each interface (its own, or 101, 102, ... by position)."""
    return [i.table if i.table is not None else TABLE_BASE + n + 1
            for n, i in enumerate(interfaces)]


def plan_mptcp(ts: TransportSettings, interfaces: Sequence[HostInterface], role: str,
               peer_multihomed: bool = False, primary: str | None = None) -> list[Step]:
    """The MPTCP commands for one host (pure; see the module docstring for the recipe).

    ts: transport settings; interfaces: the host's interfaces (not lo); role: ``client``
    (opens connections) or ``server`` (accepts them); peer_multihomed: (client) the
    server has one address per path and signals them; primary: the interface of the
    initial subflow (default: the first).
    """
    if role not in ("client", "server"):
        raise InputError(f"MPTCP role {role!r}; use 'client' or 'server'")
    if not interfaces:
        raise InputError("MPTCP needs at least one interface with an address")
    primary = primary or interfaces[0].name
    if primary not in {i.name for i in interfaces}:
        raise InputError(f"primary interface {primary!r} is not one of "
                         f"{', '.join(i.name for i in interfaces)}")
    k = ts.subflows_per_path
    steps = [Step(tuple(sysctl_write_argv("net.mptcp.enabled", 1)), "sysctl")]
    if role == "client":
        wanted = ts.subflows or min(MAX_SUBFLOWS, max(1, len(interfaces) * k - 1))
    else:
        wanted = ts.subflows or MAX_SUBFLOWS
    steps.append(Step(tuple(limits_argv(wanted, wanted)), "limits"))
    steps.append(Step(("ip", "mptcp", "endpoint", "flush"), "flush"))
    makes = (role == "client" and not peer_multihomed) or (
        role == "server" and len(interfaces) > 1)
    if role == "server" and len(interfaces) == 1 and k > 1:
        makes = False  # the client adds the extra addresses
    if not makes:
        return steps
    kind = "subflow" if role == "client" else "signal"
    multi = len(interfaces) > 1 or k > 1
    if multi:
        steps.append(Step(tuple(sysctl_write_argv("net.ipv4.conf.all.rp_filter", 2)),
                          "sysctl"))
    for iface, table in zip(interfaces, interface_tables(interfaces), strict=True):
        addrs = [] if iface.name == primary else [iface.addr]
        aliases = [alias_address(iface.addr, iface.prefixlen, j) for j in range(1, k)]
        for a in aliases:
            steps.append(Step(tuple(addr_add_argv(a, iface.prefixlen, iface.name)), "address"))
        if role == "client" and (addrs or aliases):
            for argv in table_route_argvs(iface, table):
                steps.append(Step(tuple(argv), "route"))
            for a in [iface.addr, *aliases]:
                steps.append(Step(tuple(rule_argv(a, table)), "rule"))
        for a in addrs + aliases:
            steps.append(Step(tuple(endpoint_argv(a, iface.name, kind)), "endpoint"))
    return steps


def scheduler_steps(ts: TransportSettings, have_scheduler: bool,
                    available: Iterable[str] = ()) -> list[Step]:
    """The scheduler sysctl, or `UnsupportedError` where the kernel has none.

    have_scheduler: ``net.mptcp.scheduler`` exists; available: the names it accepts
    (``net.mptcp.available_schedulers`` where present, else unknown/empty).
    """
    sched = ts.scheduler
    if sched is None or ts.protocol != "mptcp":
        return []
    if not have_scheduler:
        if sched == "default":
            return []
        raise UnsupportedError(f"transport.scheduler: {sched!r} needs net.mptcp.scheduler "
                               "(kernel >= 6.6); this kernel only has the built-in default "
                               "scheduler -- remove transport.scheduler")
    avail = list(available)
    if avail and sched not in avail:
        raise UnsupportedError(f"transport.scheduler: {sched!r} is not available; "
                               f"available: {' '.join(avail)}")
    return [Step(tuple(sysctl_write_argv(SCHEDULER_SYSCTL, sched)), "sysctl")]


# -- with the kernel ------------------------------------------------------------------
def host_interfaces(host: Any, gateways: Mapping[str, str] | None = None,
                    tables: Mapping[str, int] | None = None) -> list[HostInterface]:
    """The addressed interfaces of a Mininet host, in Mininet's order (eth0 first).

    gateways, tables: optional per-interface next hop / routing table.
    """
    out = []
    for intf in host.intfList():
        ip = intf.IP()
        if intf.name == "lo" or not ip:
            continue
        out.append(HostInterface(intf.name, ip, int(intf.prefixLen or 24),
                                 (tables or {}).get(intf.name),
                                 (gateways or {}).get(intf.name)))
    return out


_SECTION = "@@testbed-mptcp "  # a line of `reads_argv` output naming the read after it


def reads_argv(**commands: str) -> list[str]:
    """One ``sh -c`` running a few fixed read-only commands (this module's own text,
    nothing from a spec), each output after a line naming it: a program start costs
    0.1-0.3 s under software emulation.  `split_reads` takes it apart again."""
    return ["sh", "-c", "; ".join(f"echo '{_SECTION}{name}'; {cmd}"
                                  for name, cmd in commands.items())]


def split_reads(argv: Sequence[str]) -> list[tuple[str, list[str]]] | None:
    """The named commands of a `reads_argv` script (None: argv is not one), for a dry
    run that answers each of them as it answers it alone (`testbed.run.dryrun`)."""
    if len(argv) != 3 or list(argv[:2]) != ["sh", "-c"] or \
            not argv[2].startswith(f"echo '{_SECTION}"):
        return None
    parts = argv[2].split("; ")
    return [(mark.removeprefix(f"echo '{_SECTION}").removesuffix("'"), cmd.split())
            for mark, cmd in zip(parts[::2], parts[1::2], strict=True)]


def join_reads(outputs: Sequence[tuple[str, str]]) -> str:
    """What a `reads_argv` script prints, given each named command's output."""
    return "".join(f"{_SECTION}{name}\n{text}" for name, text in outputs)


def _read(runner: CommandRunner, host: Namespaced, **commands: str) -> dict[str, str]:
    """What each of a few fixed read-only commands printed in host, by name (`reads_argv`)."""
    out: dict[str, list[str]] = {name: [] for name in commands}
    current: list[str] | None = None
    for line in runner.run(reads_argv(**commands), host=host, record=False,
                           check=False).stdout.splitlines():
        if line.startswith(_SECTION):
            current = out.get(line[len(_SECTION):].strip())
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines) for name, lines in out.items()}


# A link taken down (a schedule's outage) drops the carrier of the hosts' interfaces on
# it, and by default Linux (>= 5.16) then forgets the neighbours on that interface: the
# first packet after the outage waits for ARP, whose retry timer (1 s) started during the
# outage.  `transport.keep_neighbours = true` keeps them (P3's specs: ns-2 has no ARP);
# the default is the kernel's: keeping them is a model's choice, not what Linux does
# (docs/fidelity.md, section 2b; the routers get the same, `testbed.run.execute`).
NEIGHBOUR_SYSCTLS = ("net.ipv4.conf.all.arp_evict_nocarrier",
                     "net.ipv6.conf.all.ndisc_evict_nocarrier")


def _have_sysctl(key: str) -> bool:
    return Path("/proc/sys", *key.split(".")).exists()


def neighbour_sysctls(keep: bool, have: Callable[[str], bool] = _have_sysctl
                      ) -> dict[str, int]:
    """Whether a carrier loss forgets the neighbours: kept (0) or forgotten (1, the
    kernel's default); written every run so a kept network never carries one run's
    choice into the next.  have: whether the kernel has a key (they came with 5.16 and
    5.18; an older kernel keeps neighbours anyway)."""
    return {k: 0 if keep else 1 for k in NEIGHBOUR_SYSCTLS if have(k)}


def configure_host(runner: CommandRunner, host: Namespaced, ts: TransportSettings,
                   interfaces: Sequence[HostInterface], role: str = "client",
                   peer_multihomed: bool = False, primary: str | None = None
                   ) -> dict[str, Any]:
    """Apply the transport settings inside host; return what was applied.

    runner: command runner; host: Mininet host; ts: the settings (`from_spec` for a
    spec's ``[transport]``); interfaces: `host_interfaces(host)`; role: ``client`` |
    ``server``; peer_multihomed, primary: see `plan_mptcp`.
    Raises `UnsupportedError` for an unavailable CC or scheduler.
    """
    applied: dict[str, Any] = {"host": host.name, "role": role, "protocol": ts.protocol}
    applied["sysctl"] = apply_tcp(runner, host, cc=ts.cc, rmem=ts.rmem, wmem=ts.wmem,
                                  extra={**neighbour_sysctls(ts.keep_neighbours),
                                         **ts.sysctl})
    if ts.protocol == "mptcp":
        _configure_mptcp(runner, host, ts, interfaces, role, peer_multihomed, primary,
                         applied)
    # after the MPTCP routes, so that a profile's metrics are on those too
    applied["profile"] = profile_record(ts)
    routes = apply_route_metrics(runner, host, ts.route_metrics)
    if routes:
        applied["routes"] = routes
    return applied


def profile_record(ts: TransportSettings) -> dict[str, Any]:
    """The run's transport profile for ``metadata.json``: its settings, each with the
    mechanism it stands for, and the profile sysctls an explicit ``transport.sysctl``
    entry set to another value (``overridden``: key -> the value the host got)."""
    record = ts.profile_settings.as_record()
    record["overridden"] = {k: str(ts.sysctl[k]) for k, v
                            in ts.profile_settings.sysctl_values().items()
                            if k in ts.sysctl and str(ts.sysctl[k]) != v}
    return record


def _configure_mptcp(runner: CommandRunner, host: Namespaced, ts: TransportSettings,
                     interfaces: Sequence[HostInterface], role: str,
                     peer_multihomed: bool, primary: str | None,
                     applied: dict[str, Any]) -> None:
    """The MPTCP part of `configure_host`: path manager, scheduler; into applied."""
    # the scheduler sysctl (>= 6.6) and the list it accepts (newer), and the rules
    before = _read(runner, host, rules="ip rule show",
                   sched=f"sysctl -n {SCHEDULER_SYSCTL} {AVAILABLE_SCHEDULERS}")
    sched = before["sched"].splitlines()
    have_sched = bool(sched and sched[0].strip())
    avail = sched[1].split() if len(sched) > 1 else []
    steps = plan_mptcp(ts, interfaces, role, peer_multihomed, primary)
    steps += scheduler_steps(ts, have_sched, avail)
    existing = parse_rules(before["rules"])
    todo = [s for s in steps
            if not (s.what == "rule" and (s.argv[4], s.argv[6]) in existing)]
    applied["commands"] = [list(s.argv) for s in run_steps(runner, host, todo)]
    keys = ["net.mptcp.enabled", "net.ipv4.conf.all.rp_filter"]
    after = _read(runner, host, limits="ip mptcp limits show",
                  endpoints="ip mptcp endpoint show", sysctl="sysctl -n " + " ".join(keys))
    applied["limits"], values = parse_limits(after["limits"]), after["sysctl"].splitlines()
    applied["endpoints"] = parse_endpoints(after["endpoints"])
    applied["mptcp_sysctl"] = {k: (values[i].strip() if i < len(values) else "")
                               for i, k in enumerate(keys)}
    applied["mptcp_sysctl"][SCHEDULER_SYSCTL] = sched[0].strip() if have_sched else None


def run_steps(runner: CommandRunner, host: Namespaced, steps: Sequence[Step]) -> list[Step]:
    """Run steps with few program starts: every sysctl write first, as one ``sysctl -w``
    (no write depends on an ``ip`` command, nor one on a sysctl), then the other steps in
    their order, consecutive ``ip`` commands through one ``ip -batch`` (each still
    recorded in the transcript on its own).  Returns the steps in the order they ran.  A
    refused MPTCP limit or endpoint raises `UnsupportedError`, other failures `CommandError`.
    """
    steps = sorted(steps, key=lambda s: s.argv[0] != "sysctl")  # stable
    groups: list[list[Step]] = []
    for step in steps:
        if groups and groups[-1][0].argv[0] == step.argv[0]:
            groups[-1].append(step)
        else:
            groups.append([step])
    for group in groups:
        tool = group[0].argv[0]
        if tool == "sysctl":
            runner.run(["sysctl", "-q", "-w", *(s.argv[-1] for s in group)], host=host)
            continue
        if tool != "ip":
            for s in group:
                runner.run(list(s.argv), host=host)
            continue
        shell = runner.batch_shell("ip", host)
        try:
            shell.run([list(s.argv) for s in group])
        except CommandError as exc:
            bad = next((s for s in group if list(exc.argv[-len(s.argv):]) == list(s.argv)),
                       None)
            if bad is not None and bad.what in ("limits", "endpoint"):
                raise UnsupportedError(f"MPTCP path manager refused `{' '.join(bad.argv)}` "
                                       f"in {host.name}: {exc.stderr.strip()}") from exc
            raise
        finally:
            shell.stop()
    return steps
