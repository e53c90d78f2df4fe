"""`Network`: Mininet started from a topology, shaped, and removed again -- exactly.

::

    with Network(topo, runner=runner, controller=None, workdir=run_dir) as net:
        net.host("client")                 # the Mininet Host
        net.path_interfaces("wifi")        # interfaces a named path uses
        net.apply(event)                   # a schedule event (tc qdisc change / ip link)
        net.play(events, t0)               # ... or a whole schedule, on time

Start-up, in order: refuse names that already exist (so Mininet's "delete before
create" can never touch someone else's bridge or interface); build hosts, switches and
veths; ``controller.start()`` and ``controller.pre_switch_start(net)``; start the
switches; ``controller.wait_ready(dpids, timeout)`` and ``post_switch_start(net)``;
turn segmentation offloads off on host interfaces (so every skb is one packet); set
receive packet steering on every interface (`testbed.net.steering`: no reordering made by
the emulator); build
each shaped interface's qdisc tree once (`testbed.net.shaping`); run the topology's
``setup_commands()`` (routing) if it has them.

Switches are `OVSSwitch` with the kernel datapath.  Without a controller they run in
OVS ``standalone`` mode (a learning switch: fine for loop-free topologies such as
`MultiHomedTopo`); with one, in ``secure`` mode pointing at ``tcp:127.0.0.1:<port>``.

Links: a topology link is shaped when its options carry ``shape`` (a `LinkShape`) or
TCLink-style ``bw``/``delay``/``jitter``/``loss``/``max_queue_size``.  The shape goes on
the egress of both ends, or of the nodes listed in ``shape_ends``.  Links are grouped by
their ``link_name`` option (default ``"<node1>-<node2>"``); schedule events address that
name.  ``down``/``up`` use ``ip link set`` on the root-namespace end of each link of the
group when there is one (a host-side admin-down would flush the host's routes).

Shut-down (normal exit, exception, SIGINT -> KeyboardInterrupt, SIGTERM -> SystemExit
143) removes what this object recorded, never anything matched by pattern: schedule
threads; the runner's processes in our hosts, then any other process whose network
namespace is one of our hosts' (compared by namespace inode); the controller; the
nftables tables registered with `add_nft_table`; then Mininet's own ``net.stop()``,
which deletes our veths (and with them their qdiscs), ``ovs-vsctl del-br`` for our
bridges only, and our node shells.  Finally it checks that every recorded interface,
bridge and process is gone and removes stragglers by name/PID.  What was created is
also written to ``<workdir>/network.json`` so `cleanup_from_manifest` can finish the
job after a SIGKILL.  (Mininet's ``mn -c`` is never used: it kills by pattern.)

Note: Mininet's first start raises some global limits and sysctls (``fixLimits``:
file descriptors, ``net.core.*mem_max``, ``net.ipv4.tcp_*mem``, neighbour table sizes);
these only grow and are not undone.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from testbed.core.batch import BatchShell, run_batches
from testbed.core.commands import CommandRunner, in_parallel
from testbed.core.errors import (
    CommandError,
    InputError,
    MissingFeatureError,
    RunError,
)
from testbed.net import shaping as sh
from testbed.net.cleanup import (
    MANIFEST,
    Manifest,
    deferred_interrupt,
    keep_ovs_state,
    kill_pids,
    netns_inode,
    parse_link_names,
    pids_in_netns,
    remove_leftovers,
)
from testbed.net.schedule import SchedulePlayer
from testbed.spec.model import ScheduleEvent

DEFAULT_CONTROLLER_PORT = 6653


@dataclass(frozen=True)
class Egress:
    """One shaped direction: the egress of ``intf`` on ``node``."""

    node: str
    intf: str
    in_namespace: bool


@dataclass
class NamedLink:
    """A link (or group of links) that schedule events address by name."""

    name: str
    shape: sh.LinkShape
    egress: list[Egress]
    updown: list[Egress]
    up: bool = True


@dataclass(frozen=True)
class PathInterface:
    """An interface on a named path: node, name, address, host_side (in a host)."""

    node: str
    intf: str
    addr: str | None
    host_side: bool


class ControllerTarget:
    """What Mininet's switches need to know about a remote controller (no shell, no
    telnet probe, unlike Mininet's `RemoteController`)."""

    protocol = "tcp"

    def __init__(self, name: str, ip: str = "127.0.0.1", port: int = DEFAULT_CONTROLLER_PORT):
        self.name = name
        self.ip = ip
        self.port = port

    def IP(self) -> str:  # Mininet's spelling
        return self.ip

    def start(self) -> None:
        """Nothing to start: the controller process belongs to the controller hook."""

    def stop(self) -> None:
        """Nothing to stop (see `start`)."""

    def __repr__(self) -> str:
        return f"<ControllerTarget {self.ip}:{self.port}>"


# -- pure helpers -------------------------------------------------------------------

def intf_name(node: str, port: int | None, explicit: str | None) -> str:
    """The name Mininet gives a link end: explicit, else ``<node>-eth<port>``."""
    if explicit:
        return explicit
    if port is None:
        raise InputError(f"link end on {node!r} has no port number; build the topology "
                         "with Topo.addLink")
    return f"{node}-eth{port}"


def planned_links(topo: Any) -> list[tuple[str, str, str, str, dict]]:
    """(node1, node2, intf1, intf2, options) for each topology link, in Mininet's order."""
    out = []
    for n1, n2, info in topo.links(sort=True, withInfo=True):
        out.append((info["node1"], info["node2"],
                    intf_name(info["node1"], info.get("port1"), info.get("intfName1")),
                    intf_name(info["node2"], info.get("port2"), info.get("intfName2")),
                    info))
        del n1, n2
    return out


def link_groups(topo: Any) -> dict[str, NamedLink]:
    """The shaped links of a topology, grouped by name, with their egress points."""
    switches = set(topo.switches())
    groups: dict[str, NamedLink] = {}
    for n1, n2, i1, i2, info in planned_links(topo):
        shape = sh.shape_from_mininet_params(info)
        if shape is None:
            continue
        name = info.get("link_name") or f"{n1}-{n2}"
        ends = info.get("shape_ends") or (n1, n2)
        for e in ends:
            if e not in (n1, n2):
                raise InputError(f"link {name!r}: shape_ends names {e!r}, which is not an "
                                 f"end of {n1}-{n2}")
        egress = [Egress(n, i, n not in switches) for n, i in ((n1, i1), (n2, i2))
                  if n in ends]
        root_end = [Egress(n, i, False) for n, i in ((n1, i1), (n2, i2)) if n in switches]
        updown = root_end[:1] or [Egress(n1, i1, True)]
        grp = groups.get(name)
        if grp is None:
            groups[name] = NamedLink(name, shape, egress, updown)
        else:
            if grp.shape != shape:
                raise InputError(f"links named {name!r} have different shapes")
            grp.egress += egress
            grp.updown += updown
    return groups


def base_rtt_s(topo: Any, src: str, dst: str, avoid: frozenset[str] = frozenset()
               ) -> float | None:
    """The configured round-trip delay between two nodes (pure): the configured one-way
    delays of every shaped egress on a shortest path (fewest links) there and back,
    without serialisation or queueing.  avoid: nodes the path must not cross (the other
    paths' switches, for a flow pinned to one path).  None when no path exists."""
    delay: dict[tuple[str, str], float] = {}
    for n1, n2, _i1, _i2, info in planned_links(topo):
        shape = sh.shape_from_mininet_params(info)
        ends = info.get("shape_ends") or (n1, n2)
        for a, b in ((n1, n2), (n2, n1)):
            d = shape.delay_s if shape is not None and a in ends else 0.0
            delay[(a, b)] = max(delay.get((a, b), 0.0), d)
    adj: dict[str, list[str]] = {}
    for a, b in delay:
        adj.setdefault(a, []).append(b)
    prev: dict[str, str | None] = {src: None}
    frontier = [src]
    while frontier and dst not in prev:
        nxt = []
        for u in frontier:
            for v in sorted(adj.get(u, [])):
                if v not in prev and v not in avoid:
                    prev[v] = u
                    nxt.append(v)
        frontier = nxt
    if dst not in prev:
        return None
    total, v = 0.0, dst
    while prev[v] is not None:
        u = prev[v]
        total += delay[(u, v)] + delay[(v, u)]
        v = u
    return total


def parse_nft_tables(text: str) -> set[tuple[str, str]]:
    """``nft list tables`` -> {(family, name)}."""
    out = set()
    for line in text.splitlines():
        tok = line.split()
        if len(tok) == 3 and tok[0] == "table":
            out.add((tok[1], tok[2]))
    return out


def split_qdisc_dump(text: str) -> dict[str, str]:
    """``tc -s qdisc show`` (all devices) -> {device: its qdisc lines, in order}."""
    out: dict[str, list[str]] = {}
    dev = None
    for line in text.splitlines(keepends=True):
        if line.startswith("qdisc "):
            tok = line.split()
            dev = tok[tok.index("dev") + 1] if "dev" in tok[:-1] else None
        if dev is not None:
            out.setdefault(dev, []).append(line)
    return {d: "".join(lines) for d, lines in out.items()}


# -- the network --------------------------------------------------------------------

class Network:
    """A running emulated network; use as a context manager (see the module docstring).

    topo: a Mininet `Topo`; runner: the `CommandRunner` every command goes through;
    controller: None or an object with the controller hook (start, wait_ready,
    check_alive, stop, pre_switch_start, post_switch_start; optional ``port``,
    ``protocols`` and ``inactivity_probe_ms``, the OVS echo probe its connections get
    from the start); workdir: where ``network.json`` and tc batch files go;
    offloads: keep TSO/GSO/GRO on host interfaces (default off); ready_timeout: seconds
    to wait for the controller to see every switch; handle_signals: turn SIGINT/SIGTERM
    into exceptions while the network runs (main thread only); baseline_hosts: record
    each host's transport state for `end_run` to restore; rps: receive packet steering
    on every interface (default; without it the emulator reorders packets on more than
    one CPU, see `testbed.net.steering`).
    """

    def __init__(self, topo: Any, runner: CommandRunner | None = None, controller: Any = None,
                 workdir: Path | None = None, offloads: bool = False,
                 ready_timeout: float = 300.0, handle_signals: bool = True,
                 baseline_hosts: bool = False, rps: bool = True):
        self.topo = topo
        # rps: steer each flow's packets through one CPU (`_steer_flows`); off only to
        # measure what the emulator does without it (benchmarks/fidelity.py)
        self.rps = rps
        self.rps_mask: str | None = None
        self.runner = runner or CommandRunner()
        self.controller = controller
        self.workdir = Path(workdir) if workdir is not None else None
        self.offloads = offloads
        self.ready_timeout = ready_timeout
        self.handle_signals = handle_signals
        self.links = link_groups(topo)
        # what every link is configured as, for `begin_run` to undo a schedule's changes
        self._configured = {n: (link.shape, link.up) for n, link in self.links.items()}
        self.manifest = Manifest()
        self.mn: Any = None
        self.cleanup_report: dict[str, list[str]] = {}
        self.cleanup_errors: list[str] = []
        self._planned = planned_links(topo)
        self._players: list[SchedulePlayer] = []
        self._lock = threading.Lock()
        self._old_handlers: dict[int, Any] = {}
        self._started = False
        self._stopped = False
        self._shells: dict[tuple[str, str], BatchShell] = {}
        self._warmed = False
        self._schedule_shells: list[BatchShell] = []  # warmed and real-time
        # baseline_hosts: each host's transport state right after the start, which
        # `end_run` restores (so runs with other transports may follow; `hoststate`)
        self.baseline_hosts = baseline_hosts
        self.host_baseline: dict[str, Any] | None = None
        self._baseline_keys: list[str] = []

    # -- context manager --------------------------------------------------------------
    def __enter__(self) -> Network:
        self.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.stop()
        if exc_type is None and self.cleanup_errors:
            raise RunError("network clean-up had errors: " + "; ".join(self.cleanup_errors))

    # -- start ------------------------------------------------------------------------
    def start(self) -> Network:
        """Build and start the network (see the module docstring for the order)."""
        if self._started:
            raise RunError("this Network was already started; make a new one")
        self._started = True
        self._install_signal_handlers()
        try:
            self._preflight()
            self._build()
            self._start_switches()
            self._configure()
            if self.baseline_hosts:
                self._take_host_baseline()
        except BaseException:
            try:
                if self.mn is not None and self.mn.switches and self.workdir is not None:
                    # what explains a switch that never reached its controller, before the
                    # bridges are gone (a VM's OVS log lives in a tmpfs)
                    keep_ovs_state(self.runner, self.workdir)
            finally:
                self.stop()
            raise
        return self

    def _preflight(self) -> None:
        if os.geteuid() != 0:
            raise MissingFeatureError("starting a network needs root; run as root or use "
                                      "`testbed vm -- ...`")
        existing = set(parse_link_names(self.runner.run(["ip", "-o", "link", "show"]).stdout))
        wanted = set(self.topo.switches())
        for _n1, _n2, i1, i2, _info in self._planned:
            wanted |= {i1, i2}
        clash = sorted(wanted & existing)
        if clash:
            raise RunError(f"interfaces {', '.join(clash[:8])} already exist; another network "
                           "is running or a previous run left them (see its network.json: "
                           "`cleanup_from_manifest`)")
        if self.topo.switches():
            try:
                bridges = set(self.runner.run(["ovs-vsctl", "--timeout=10", "list-br"])
                              .stdout.split())
            except CommandError as exc:
                raise MissingFeatureError("Open vSwitch is not running (ovs-vsctl failed); "
                                          "start it with `/usr/share/openvswitch/scripts/"
                                          "ovs-ctl start` or use `testbed vm`") from exc
            clash = sorted(bridges & set(self.topo.switches()))
            if clash:
                raise RunError(f"OVS bridges {', '.join(clash)} already exist; another "
                               "network is running")

    def _switch_class(self) -> Callable[..., Any]:
        from functools import partial

        from testbed.net.mininet_nodes import ProbedOVSSwitch

        # batch: every bridge in one ovs-vsctl transaction (`ProbedOVSSwitch.batchStartup`)
        if self.controller is None:
            return partial(ProbedOVSSwitch, datapath="kernel", failMode="standalone",
                           batch=True)
        protocols = getattr(self.controller, "protocols", "OpenFlow13")
        probe = getattr(self.controller, "inactivity_probe_ms", None)
        return partial(ProbedOVSSwitch, datapath="kernel", failMode="secure",
                       protocols=protocols, inactivity_probe_ms=probe, batch=True)

    def _prepare_ovs(self) -> None:
        """Stand in for Mininet's OVS check, whose 1 s ``ovs-vsctl -t 1 show`` times out on
        a loaded VM and then calls exit(1); `_preflight` checked OVS with 10 s."""
        from mininet.node import OVSSwitch

        if self.topo.switches() and not OVSSwitch.isSetup:
            found = re.findall(r"\d+\.\d+", self.runner.run(["ovs-vsctl", "--version"]).stdout)
            if not found:
                raise MissingFeatureError("cannot tell the Open vSwitch version "
                                          "(ovs-vsctl --version)")
            OVSSwitch.OVSVersion = found[0]
            OVSSwitch.isSetup = True

    def _build(self) -> None:
        from mininet.link import Link
        from mininet.net import Mininet

        from testbed.net.mininet_nodes import QuickHost, QuickIntf

        self._prepare_ovs()
        self.mn = Mininet(topo=self.topo, switch=self._switch_class(), host=QuickHost,
                          link=Link, intf=QuickIntf, controller=None, build=False,
                          autoSetMacs=True, cleanup=False, waitConnected=False)
        if self.controller is not None:
            port = int(getattr(self.controller, "port", DEFAULT_CONTROLLER_PORT))
            self.mn.addController("c0", controller=lambda name, **_: ControllerTarget(
                name, "127.0.0.1", port))
        try:
            self.mn.build()
        finally:
            self._record()

    def _record(self) -> None:
        """Note every node, interface and bridge Mininet has made so far."""
        if self.mn is None:
            return
        m = self.manifest
        for h in self.mn.hosts:
            if h.name not in m.hosts and h.shell is not None:
                m.hosts[h.name] = h.pid
                ino = netns_inode(h.pid) if h.inNamespace else None
                if ino is not None:
                    m.netns[h.name] = ino
        for s in self.mn.switches:
            if s.name not in m.switches and s.shell is not None:
                m.switches[s.name] = s.pid
                if s.name not in m.bridges:
                    m.bridges.append(s.name)
        for link in self.mn.links:
            for intf in (link.intf1, link.intf2):
                if intf is not None and intf.name not in m.interfaces:
                    m.interfaces.append(intf.name)
        self._write_manifest()

    def _record_controller(self, ctl: Any) -> None:
        """Put the controller's process (pid, start time) into the manifest, so that a
        clean-up after a SIGKILL of this process ends it too."""
        self.manifest.record_process("controller", getattr(getattr(ctl, "proc", None),
                                                           "pid", None))
        self._write_manifest()

    def _write_manifest(self) -> None:
        if self.workdir is not None:
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.manifest.write(self.workdir / MANIFEST)

    def _start_switches(self) -> None:
        ctl = self.controller
        if ctl is not None:
            ctl.start()
            self._record_controller(ctl)
            ctl.pre_switch_start(self)
        self.mn.start()
        self._check_bridges()
        if ctl is not None:
            self._wait_programmed(ctl)

    def _wait_programmed(self, ctl: Any) -> None:
        ctl.wait_ready([int(s.dpid, 16) for s in self.mn.switches], self.ready_timeout)
        ctl.post_switch_start(self)

    def _check_bridges(self) -> None:
        """Every switch of the topology is a bridge in OVS now (one ``ovs-vsctl`` call)."""
        if not self.mn.switches:
            return
        bridges = set(self.runner.run(["ovs-vsctl", "--timeout=30", "list-br"]).stdout.split())
        missing = [s.name for s in self.mn.switches if s.name not in bridges]
        if missing:
            raise RunError(f"Open vSwitch has no bridge for {', '.join(missing[:8])} after "
                           "the switches started; see ovs-vswitchd's log "
                           "(/var/log/openvswitch/ovs-vswitchd.log)")

    def _configure(self) -> None:
        if not self.offloads:  # a host at a time on a few threads (a fat-tree has 16)
            def offloads_off(h: Any) -> None:
                for intf in h.intfList():
                    if intf.name != "lo":
                        self.runner.run(sh.offload_command(intf.name), host=h)
            in_parallel(offloads_off, list(self.mn.hosts))
        if self.rps:
            self._steer_flows()
        per_node: dict[str, list[list[str]]] = {}
        for link in self.links.values():
            for eg in link.egress:
                per_node.setdefault(eg.node if eg.in_namespace else "", []).extend(
                    sh.setup_commands(eg.intf, link.shape))
        self._run_batches(per_node)
        if hasattr(self.topo, "setup_commands"):
            self._run_setup_commands(self.topo.setup_commands())

    def namespace_interfaces(self) -> dict[str, list[str]]:
        """The interfaces this network's links made, by the node whose namespace holds
        them ("" for the root namespace: switch ports), in the topology's order."""
        in_ns = {h.name for h in self.mn.hosts if h.inNamespace} if self.mn else set()
        out: dict[str, list[str]] = {}
        for n1, n2, i1, i2, _info in self._planned:
            for node, intf in ((n1, i1), (n2, i2)):
                out.setdefault(node if node in in_ns else "", []).append(intf)
        return out

    def monitor_links(self) -> list[Any]:
        """The shaped link directions whose counters the root namespace can read
        (`testbed.net.monitor.link_counters`)."""
        from testbed.net.monitor import link_counters

        in_ns = {h.name for h in self.mn.hosts if h.inNamespace} if self.mn else set()
        peer: dict[str, str] = {}
        where: dict[str, bool] = {}
        for n1, n2, i1, i2, _info in self._planned:
            peer[i1], peer[i2] = i2, i1
            where[i1], where[i2] = n1 in in_ns, n2 in in_ns
        return link_counters(self.links, peer, where)

    def _steer_flows(self) -> None:
        """Receive packet steering on every interface of this network (one program
        start per namespace): each flow's packets go through one CPU's backlog, so the
        emulator does not reorder them (`testbed.net.steering`, docs/fidelity.md)."""
        from testbed.net.steering import cpu_mask, online_cpus, rps_command

        mask = cpu_mask(online_cpus())
        self.rps_mask = mask
        groups = sorted(self.namespace_interfaces().items())

        def steer(item: tuple[str, list[str]]) -> None:
            node, intfs = item
            self.runner.run(rps_command(intfs, mask), host=self.node(node) if node else None)
        in_parallel(steer, groups)

    def _run_setup_commands(self, cmds: list[tuple[str, list[str]]]) -> None:
        """The topology's (host, argv) routing set-up with few program starts: a host's
        ``sysctl -q -w`` writes as one, its ``ip`` commands through its batch shell (each
        still in the transcript), anything else as it comes; sysctls before routes."""
        sysctls: dict[str, list[str]] = {}
        ip_cmds: dict[str, list[list[str]]] = {}
        for host, argv in cmds:
            if argv[:3] == ["sysctl", "-q", "-w"]:
                sysctls.setdefault(host, []).extend(argv[3:])
            elif argv[0] == "ip":
                ip_cmds.setdefault(host, []).append(argv)
            else:
                self.runner.run(argv, host=self.node(host))
        for host, values in sysctls.items():
            self.runner.run(["sysctl", "-q", "-w", *values], host=self.node(host))
        self._run_batches(ip_cmds)

    # -- access -----------------------------------------------------------------------
    def node(self, name: str) -> Any:
        """The Mininet node (host or switch) called name."""
        if self.mn is None or name not in self.mn.nameToNode:
            raise InputError(f"no node named {name!r} in this network")
        return self.mn.nameToNode[name]

    def host(self, name: str) -> Any:
        """The Mininet host called name."""
        node = self.node(name)
        if node not in self.mn.hosts:
            raise InputError(f"{name!r} is a switch, not a host")
        return node

    def link(self, name: str) -> NamedLink:
        """The named (shaped) link."""
        if name not in self.links:
            known = ", ".join(sorted(self.links)) or "none"
            raise InputError(f"no shaped link named {name!r}; this network has {known}")
        return self.links[name]

    def path_interfaces(self, path: str) -> list[PathInterface]:
        """Every interface on the links whose ``path`` option is path, hosts' first."""
        hosts = set(self.topo.hosts())
        out = []
        for n1, n2, i1, i2, info in self._planned:
            if info.get("path") != path:
                continue
            for n, i, params in ((n1, i1, info.get("params1")), (n2, i2, info.get("params2"))):
                addr = (params or {}).get("ip")
                out.append(PathInterface(n, i, addr.split("/")[0] if addr else None,
                                         n in hosts))
        if not out:
            known = sorted({i.get("path") for *_x, i in self._planned if i.get("path")})
            raise InputError(f"no path named {path!r}; this network has "
                             f"{', '.join(known) or 'no named paths'}")
        return sorted(out, key=lambda p: (not p.host_side, p.node, p.intf))

    def interface_map(self) -> dict[str, dict[str, Any]]:
        """Host interfaces -> {host, path, addr}, for ``metadata.json``."""
        paths: dict[str, str | None] = {}
        for _n1, _n2, i1, i2, info in self._planned:
            paths[i1] = paths[i2] = info.get("path")
        out = {}
        for h in self.mn.hosts:
            for intf in h.intfList():
                if intf.name != "lo":
                    out[intf.name] = {"host": h.name, "path": paths.get(intf.name),
                                      "addr": intf.IP()}
        return out

    def describe(self) -> dict[str, Any]:
        """The shaped links in base units, for ``metadata.json``."""
        return {name: {"shape": asdict(link.shape), "up": link.up,
                       "egress": [asdict(e) for e in link.egress]}
                for name, link in self.links.items()}

    def tc_dump(self) -> dict[str, str]:
        """``tc -s qdisc show`` of every shaped interface (for ``metadata.json``): one
        ``tc`` per namespace, split by device."""
        where: dict[str, list[str]] = {}
        for link in self.links.values():
            for eg in link.egress:
                where.setdefault(eg.node if eg.in_namespace else "", []).append(eg.intf)
        out = {}
        for node, intfs in where.items():
            text = self.runner.run(["tc", "-s", "qdisc", "show"], record=False,
                                   host=self.node(node) if node else None).stdout
            blocks = split_qdisc_dump(text)
            for intf in intfs:
                out[intf] = blocks.get(intf, "")
        return out

    def check(self) -> None:
        """Raise `RunError` if the controller died."""
        if self.controller is not None:
            self.controller.check_alive()

    # -- changes ----------------------------------------------------------------------
    def set_shape(self, name: str, shape: sh.LinkShape) -> None:
        """Change the named link to shape with ``tc qdisc change`` (no re-creation)."""
        link = self.link(name)
        with self._lock:
            per_node: dict[str, list[list[str]]] = {}
            for eg in link.egress:
                per_node.setdefault(eg.node if eg.in_namespace else "", []).extend(
                    sh.change_commands(eg.intf, link.shape, shape))
            self._run_batches(per_node)
            link.shape = shape

    def set_up(self, name: str, up: bool) -> None:
        """Take the named link down or bring it back (``ip link set``)."""
        link = self.link(name)
        with self._lock:
            per_node: dict[str, list[list[str]]] = {}
            for eg in link.updown:
                per_node.setdefault(eg.node if eg.in_namespace else "", []).append(
                    sh.link_state_command(eg.intf, up))
            self._run_batches(per_node)
            link.up = up

    def apply(self, event: ScheduleEvent) -> None:
        """Apply a schedule event now: shape changes first, then down/up."""
        link = self.link(event.link)
        new = event.apply_to(link.shape)
        if new != link.shape:
            self.set_shape(event.link, new)
        if event.up is not None and event.up != link.up:
            self.set_up(event.link, event.up)

    def prepare_schedule(self, events: Sequence[ScheduleEvent]) -> None:
        """Get ready to apply events on time: start the batch shells they will use, have
        them read their interfaces once, give them a real-time priority (where allowed),
        and run the kernel's change paths once on a throwaway veth.  Under software
        emulation this takes a second or more, so call it before the run's time origin
        is fixed; `play` does it itself otherwise (shells already warmed are skipped)."""
        warm: dict[tuple[str | None, str], list[list[str]]] = {}
        for ev in events:
            link = self.link(ev.link)
            # the first use of a code path is slow in an emulated VM (about 0.2 s), later
            # ones are not
            for eg in link.egress:
                warm.setdefault((eg.node if eg.in_namespace else None, "tc"), []).append(
                    ["tc", "qdisc", "show", "dev", eg.intf])
            for eg in link.updown:
                warm.setdefault((eg.node if eg.in_namespace else None, "ip"), []).append(
                    ["ip", "link", "show", "dev", eg.intf])
        if self.runner.dry_run:
            return
        if events and not self._warmed:
            self._warm_kernel_paths()
        for (node, tool), cmds in warm.items():
            shell = self._shell(node, tool)
            if shell not in self._schedule_shells:  # new (or restarted): warm it up
                shell.run(list({tuple(c): c for c in cmds}.values()))
                shell.realtime()  # it sleeps until an event, then must run at once
                self._schedule_shells.append(shell)

    def play(self, events: Sequence[ScheduleEvent], t0: float | None = None,
             log: Path | None = None) -> SchedulePlayer:
        """Start applying events at ``t0 + at`` in a thread (t0 default: now, taken after
        `prepare_schedule`, which this calls).

        log: the ``events.jsonl`` file (default: ``<workdir>/samples/events.jsonl``).
        The player is stopped when the network stops.
        """
        self.prepare_schedule(events)
        if log is None and self.workdir is not None:
            log = self.workdir / "samples" / "events.jsonl"
        player = SchedulePlayer(self.apply, events, time.time() if t0 is None else t0, log)
        self._players.append(player)
        return player.start()

    def add_nft_table(self, family: str, name: str, body: str) -> None:
        """Create an nftables table (recorded, deleted at stop).

        family: e.g. ``netdev``; name: table name (must not exist yet); body: the
        table's contents (chains and rules) as nft syntax, without the ``table`` line.
        """
        self.add_nft_tables([(family, name, body)])

    def add_nft_tables(self, tables: Sequence[tuple[str, str, str]]) -> None:
        """Create several nftables tables at once: (family, name, body) each, as in
        `add_nft_table` (one ``nft list tables`` and one ``nft -f -`` for all of them)."""
        if not tables:
            return
        existing = parse_nft_tables(self.runner.run(["nft", "list", "tables"],
                                                    record=False).stdout)
        clash = sorted(f"{f} {n}" for f, n, _b in tables if (f, n) in existing)
        if clash:
            raise RunError(f"nftables tables {', '.join(clash)} already exist; they are not "
                           "ours (delete them by hand if a previous run left them)")
        self.manifest.nft_tables.extend([f, n] for f, n, _b in tables)
        self._write_manifest()
        script = "".join(f"table {f} {n} {{\n{b}\n}}\n" for f, n, b in tables)
        self.runner.run(["nft", "-f", "-"], input=script)

    def _shell(self, node: str | None, tool: str) -> BatchShell:
        """The long-lived ``tool -batch`` process for node (None: the root namespace)."""
        key = (node or "", tool)
        shell = self._shells.get(key)
        if shell is None or not shell.running():
            shell = self.runner.batch_shell(tool, self.node(node) if node else None)
            self._shells[key] = shell
        return shell

    def _run_batches(self, per_node: dict[str, list[list[str]]]) -> None:
        """Run tc / ip commands through the nodes' batch shells (no fork per change),
        every shell at once.  per_node: {node name or "" for the root namespace: argvs}."""
        if self.runner.dry_run:
            for node, cmds in per_node.items():
                for argv in cmds:
                    self.runner.run(argv, host=self.node(node) if node else None)
            return
        jobs = []
        for node, cmds in per_node.items():
            for tool in sorted({c[0] for c in cmds}):
                jobs.append((self._shell(node or None, tool), [c for c in cmds if c[0] == tool]))
        if jobs:
            run_batches(jobs)

    def _warm_kernel_paths(self) -> None:
        """Change a qdisc tree and take a link down and up once, on a throwaway veth pair.

        The first time the kernel (and iproute2) runs a code path it is slow in a
        software-emulated VM: a first ``ip link set down`` took 60 ms there, later ones
        5 ms.  Doing it once here, on interfaces no traffic uses, keeps a schedule's
        first events on time.  The pair is in the manifest while it exists.
        """
        self._warmed = True
        a, b = f"tbw{os.getpid() % 100000}a", f"tbw{os.getpid() % 100000}b"
        self.manifest.interfaces.append(a)
        self._write_manifest()
        tc, ip = self._shell(None, "tc"), self._shell(None, "ip")
        one = sh.LinkShape(bw_bps=10_000_000, delay_s=0.01, loss_pct=1.0, queue_pkts=100)
        two = one.changed(bw_bps=2_000_000, delay_s=0.02, loss_pct=0.0)
        try:
            self.runner.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b])
            ip.run([["ip", "link", "set", "dev", a, "up"], ["ip", "link", "set", "dev", b, "up"]])
            tc.run(sh.setup_commands(a, one))
            tc.run(sh.change_commands(a, one, two))
            ip.run([["ip", "link", "set", "dev", a, "down"], ["ip", "link", "set", "dev", a, "up"]])
        finally:
            self.runner.run(["ip", "link", "del", "dev", a], check=False)
            self.manifest.interfaces.remove(a)
            self._write_manifest()

    def _stop_shells(self) -> None:
        for shell in self._shells.values():
            shell.stop()
        self._shells.clear()
        self._schedule_shells.clear()

    # -- stop -------------------------------------------------------------------------
    def stop(self) -> None:
        """Remove everything this network created (idempotent; never raises for a step)."""
        if self._stopped:
            return
        self._stopped = True
        self._guard_signals()
        try:
            self._step("schedules", self._stop_players)
            self._step("processes", self._stop_host_processes)
            if self.controller is not None and self._started:
                self._step("controller", self.controller.stop)
            self._step("nftables", self._delete_nft_tables)
            if self.mn is not None:
                self._step("record", self._record)
                self._step("links", self._delete_links)
                self._step("mininet", self.mn.stop)
            self._step("leftovers", self._remove_leftovers)
            self._step("manifest", self.manifest.discard)
        finally:
            self._restore_signal_handlers()
        deferred = deferred_interrupt(self.cleanup_report.get("signals_during_cleanup", []))
        if deferred is not None:  # the clean-up finished; now the Ctrl-C / SIGTERM counts
            raise deferred

    # -- one network, several runs -----------------------------------------------------
    def end_run(self) -> None:
        """Remove what one run added to this network and keep the rest for the next run
        (`begin_run`): schedule players and batch shells stop, every process in the hosts
        is ended, the controller is stopped and its nftables tables deleted.  Hosts,
        links, shaping and switches stay.  Raises `RunError` naming what could not be
        removed; the network should then be stopped instead of reused."""
        if not self._started or self._stopped:
            raise RunError("end_run: this network is not running")
        before = len(self.cleanup_errors)
        self._step("schedules", self._stop_players)
        self._step("processes", self._stop_host_processes)
        if self.controller is not None:
            self._step("controller", self.controller.stop)
            if len(self.cleanup_errors) == before:  # else `stop` tries again
                self.controller = None
        self._step("nftables", self._delete_nft_tables)
        self._players.clear()
        self._shells.clear()
        self._schedule_shells.clear()
        if self.host_baseline is not None:
            self._step("host state", self._restore_hosts)
        failed = self.cleanup_errors[before:]
        if failed:
            raise RunError("the network cannot be reused: " + "; ".join(failed))

    def _take_host_baseline(self) -> None:
        from testbed.net.hoststate import baseline, sysctl_keys

        self._baseline_keys = sysctl_keys(writable=True)
        self.host_baseline = baseline(self.runner, list(self.mn.hosts), self._baseline_keys)

    def _restore_hosts(self) -> None:
        """Every host's transport state back to the baseline; RunError naming what could
        not be restored (the network must then not serve another run)."""
        from testbed.net.hoststate import restore

        assert self.host_baseline is not None
        hosts = list(self.mn.hosts)
        left = in_parallel(lambda h: restore(self.runner, h, self.host_baseline[h.name],
                                             self._baseline_keys), hosts)
        problems = [f"{h.name}: {d}" for h, diff in zip(hosts, left, strict=True)
                    for d in diff]
        if problems:
            raise RunError("host state differs from the fresh network's: "
                           + "; ".join(problems[:5]))

    def begin_run(self, runner: CommandRunner, controller: Any = None,
                  workdir: Path | None = None) -> None:
        """Make this network, kept by `end_run`, ready for the next run.

        runner: the run's command runner (its transcript gets every command from now on);
        controller: the run's controller hook (started here, then waited for until every
        switch is programmed again: a new controller wipes the previous one's rules);
        workdir: where the manifest goes now (the run's bundle, so that a crash is
        cleaned up from there).  Links that a schedule changed get their configured shape
        and state back; every host's TCP metrics and neighbour caches are flushed and
        standalone bridges forget the MACs they learned, so the run starts as cold as on a
        new network (a cached ssthresh or RTT would carry one run's outcome into the next).
        """
        if not self._started or self._stopped:
            raise RunError("begin_run: this network is not running")
        self.runner = runner
        if workdir is not None:
            self.workdir = Path(workdir)
            self._write_manifest()
        for name, (shape, up) in self._configured.items():
            link = self.links[name]
            if link.shape != shape:
                self.set_shape(name, shape)
            if link.up != up:
                self.set_up(name, up)
        # cold caches, as on a new network: TCP metrics, ARP/neighbours, learned MACs
        self._run_batches({h.name: [["ip", "tcp_metrics", "flush", "all"],
                                    ["ip", "neigh", "flush", "all"]] for h in self.mn.hosts})
        if self.mn.switches and controller is None:  # standalone bridges learn MACs
            for sw in self.mn.switches:
                self.runner.run(["ovs-appctl", "fdb/flush", sw.name], timeout=30)
        self.controller = controller
        if controller is not None:
            controller.start()
            self._record_controller(controller)
            controller.pre_switch_start(self)
            self._wait_programmed(controller)

    def _step(self, what: str, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except Exception as exc:  # keep cleaning; report at the end
            self.cleanup_errors.append(f"{what}: {exc}")

    def _stop_players(self) -> None:
        for p in self._players:
            p.stop()
        self._stop_shells()

    def _stop_host_processes(self) -> None:
        names = set(self.manifest.hosts)
        for proc in self.runner.running():
            if proc.where in names:
                proc.stop()
        shells = set(self.manifest.hosts.values()) | set(self.manifest.switches.values())
        strays = pids_in_netns(set(self.manifest.netns.values()), exclude=shells)
        if strays:
            self.cleanup_report["processes"] = [str(p) for p in kill_pids(strays)]

    def _delete_links(self) -> None:
        """Delete every veth with an end in the root namespace in one ``ip -batch``
        (Mininet would start ``ip link del`` once per link); Mininet deletes the rest."""
        ends = {}
        for link in self.mn.links:
            for intf in (link.intf1, link.intf2):
                if intf is not None and not getattr(intf.node, "inNamespace", True):
                    ends[intf.name] = link
                    break
        if not ends:
            return
        shell = self.runner.batch_shell("ip")
        try:
            shell.run([["ip", "link", "del", "dev", name] for name in ends])
        except CommandError:
            pass  # one already gone; whatever is left is deleted by name below
        finally:
            shell.stop()
        existing = set(parse_link_names(self.runner.run(["ip", "-o", "link", "show"],
                                                        record=False).stdout))
        for name, link in ends.items():
            if name not in existing:
                link._tb_deleted = True  # `QuickIntf.delete` has nothing left to do

    def _delete_nft_tables(self) -> None:
        if not self.manifest.nft_tables:
            return
        existing = parse_nft_tables(self.runner.run(["nft", "list", "tables"],
                                                    record=False).stdout)
        ours = [(f, n) for f, n in self.manifest.nft_tables if (f, n) in existing]
        if ours:
            self.runner.run(["nft", "-f", "-"],
                            input="".join(f"delete table {f} {n}\n" for f, n in ours))
        self.manifest.nft_tables.clear()
        self._write_manifest()

    def _remove_leftovers(self) -> None:
        report = remove_leftovers(self.manifest, self.runner)
        for k, v in report.items():
            self.cleanup_report.setdefault(k, []).extend(v)

    # -- signals ----------------------------------------------------------------------
    def _install_signal_handlers(self) -> None:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return

        def raise_on(signum: int, _frame: Any) -> None:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise SystemExit(128 + signum)

        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old_handlers[sig] = signal.signal(sig, raise_on)

    def _guard_signals(self) -> None:
        """While cleaning up, a second Ctrl-C or SIGTERM must not cut the clean-up short."""
        if not self._old_handlers:
            return
        for sig in self._old_handlers:
            signal.signal(sig, lambda signum, _f: self.cleanup_report.setdefault(
                "signals_during_cleanup", []).append(str(signum)))

    def _restore_signal_handlers(self) -> None:
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers.clear()
