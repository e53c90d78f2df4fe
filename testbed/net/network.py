"""`Network`: Mininet started from a topology, shaped, and removed again -- exactly.

::

    with Network(topo, runner=runner, controller=None, workdir=run_dir) as net:
        net.host("client")                 # the Mininet Host
        net.path_interfaces("wifi")        # interfaces a named path uses
        net.apply(event)                   # a schedule event (tc qdisc change / ip link)
        net.play(events, t0)               # ... or a whole schedule, on time

`Network` holds the order of things and hands each step to the module that does it:
`links` (the topology's named links and paths, pure), `mininet_net` (the one place
Mininet's network object is made: OVS kernel bridges, standalone without a controller,
secure with one), `bringup` (the start's checks and set-up commands),
`linkstate` (shapes and up/down now, changes, schedules, batch shells), `record` (the
manifest, ``network.json``), `nftables` (the controller's tables), `hoststate` (the
hosts' transport state, put back between runs), `teardown` (clean-up steps, signals).

Start-up, in order: refuse names that already exist (`bringup.preflight`); build hosts,
switches and veths; ``controller.start()`` and ``controller.pre_switch_start(net)``;
start the switches; ``controller.wait_ready(dpids, timeout)`` and
``post_switch_start(net)``; segmentation offloads off on host interfaces; receive packet
steering on every interface (`testbed.net.steering`); each shaped interface's qdisc tree
(`testbed.net.shaping`); the topology's ``setup_commands()`` (routing) if it has them.

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
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from testbed.core.commands import CommandRunner, in_parallel
from testbed.core.errors import InputError, RunError
from testbed.core.recording import recording
from testbed.net import bringup, nftables
from testbed.net.cleanup import keep_ovs_state
from testbed.net.hoststate import HostBaseline, cold_cache_commands
from testbed.net.linkstate import BatchShells, LinkState, setup_commands
from testbed.net.mininet_net import make_mininet
from testbed.net.monitor import LinkCounter, link_counters
from testbed.net.netns import NODE_NAME, netns_handle, this_process
from testbed.net.nettypes import ControllerHook, MnNet, MnNode
from testbed.net.record import NetworkRecord
from testbed.net.schedule import SchedulePlayer
from testbed.net.steering import cpu_mask, online_cpus
from testbed.net.teardown import Teardown, delete_links
from testbed.plan import links as linkmodel
from testbed.spec.linkshape import LinkShape
from testbed.spec.model import ScheduleEvent

if TYPE_CHECKING:
    from mininet.topo import Topo

    from testbed.net.cleanup import Manifest


class Network:
    """A running emulated network; use as a context manager (see the module docstring).

    topo: a Mininet `Topo`; runner: the `CommandRunner` every command goes through;
    controller: None or a `testbed.net.nettypes.ControllerHook` (optional ``port``,
    ``protocols`` and ``inactivity_probe_ms``, the OVS echo probe its connections get
    from the start); workdir: where ``network.json`` goes; offloads: keep TSO/GSO/GRO on
    host interfaces (default off); ready_timeout: seconds to wait for the controller to
    see every switch; handle_signals: turn SIGINT/SIGTERM into exceptions while the
    network runs (main thread only); baseline_hosts: record each host's transport state
    for `end_run` to restore; rps: receive packet steering on every interface (default;
    without it the emulator reorders packets on more than one CPU, `testbed.net.steering`).
    """

    def __init__(self, topo: Topo, runner: CommandRunner | None = None,
                 controller: ControllerHook | None = None, workdir: Path | None = None,
                 offloads: bool = False, ready_timeout: float = 300.0,
                 handle_signals: bool = True, baseline_hosts: bool = False, rps: bool = True):
        self.topo = topo
        # rps: steer each flow's packets through one CPU (`bringup.steer_flows`); off only
        # to measure what the emulator does without it (benchmarks/fidelity.py)
        self.rps = rps
        self.rps_mask: str | None = None
        self.runner = runner or CommandRunner()
        self.controller = controller
        self.offloads = offloads
        self.ready_timeout = ready_timeout
        self.mn: MnNet | None = None
        self.record = NetworkRecord(Path(workdir) if workdir is not None else None)
        # who made it: a later process cleans it up once this one is gone
        # (`testbed.run.recovery.recover_dead_networks`)
        if not recording(self.runner):
            self.record.manifest.owner = this_process()
        self.shells = BatchShells(self.node)
        self.links = linkmodel.link_groups(topo)
        self.link_state = LinkState(self.links, self.shells, self.record)
        self.teardown = Teardown(handle_signals)
        # baseline_hosts: each host's transport state right after the start, which
        # `end_run` restores (so runs with other transports may follow; `hoststate`)
        self.baseline_hosts = baseline_hosts
        self.baseline = HostBaseline()
        self._planned = linkmodel.planned_links(topo)
        self._started = False
        self._stopped = False

    # -- what other parts read ----------------------------------------------------------
    @property
    def workdir(self) -> Path | None:
        """Where ``network.json`` goes (a kept network: the current run's bundle)."""
        return self.record.workdir

    @property
    def manifest(self) -> Manifest:
        """What this network created, by name/PID."""
        return self.record.manifest

    @property
    def cleanup_report(self) -> dict[str, list[str]]:
        """What the clean-up removed beyond the recorded (stragglers, signals)."""
        return self.teardown.report

    @property
    def cleanup_errors(self) -> list[str]:
        """The clean-up steps that failed, as ``"<step>: <error>"``."""
        return self.teardown.errors

    # -- context manager --------------------------------------------------------------
    def __enter__(self) -> Network:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
        if exc_type is None and self.cleanup_errors:
            raise RunError("network clean-up had errors: " + "; ".join(self.cleanup_errors))

    # -- start ------------------------------------------------------------------------
    def start(self) -> Network:
        """Build and start the network (see the module docstring for the order)."""
        if self._started:
            raise RunError("this Network was already started; make a new one")
        self._started = True
        self.teardown.install_signal_handlers()
        try:
            bringup.preflight(self.runner, self.topo, self._planned)
            self._build()
            self._start_switches()
            self._configure()
            if self.baseline_hosts:
                self.baseline.take(self.runner, list(self._mn.hosts))
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

    def _build(self) -> None:
        self.mn = make_mininet(self.runner, self.topo, self.controller, self.manifest.tag)
        try:
            self.mn.build()
        finally:
            self.record.note_nodes(self.mn)
        bringup.tag_interfaces(self.runner, self.mn, self.manifest.tag)
        self._hold_namespaces()

    def _hold_namespaces(self) -> None:
        """An ``ip netns`` handle on every host's namespace (``tb-<tag>-<host>``, in the
        manifest before it exists), so that a clean-up after a SIGKILL -- when the hosts'
        shells are gone with the process that fed them -- can still enter a namespace to
        destroy the sockets left in it (`testbed.net.cleanup.remove_leftovers`); the
        clean-up deletes the handles, and with them the namespaces."""
        mn = self._mn
        # a name outside `NODE_NAME` gets no handle (a custom topology's odd host name)
        nodes = [h for h in mn.hosts if h.inNamespace and re.fullmatch(NODE_NAME, h.name)]
        if not nodes:
            return
        names = [netns_handle(self.manifest.tag, h.name) for h in nodes]
        self.manifest.netns_handles.extend(n for n in names
                                           if n not in self.manifest.netns_handles)
        self.record.write()
        # not checked: without a handle only that clean-up is lost (an old iproute2)
        self.runner.run(["ip", "-force", "-batch", "-"], timeout=60, check=False, input="".join(
            f"netns attach {n} {h.pid}\n" for n, h in zip(names, nodes, strict=True)))

    def _start_switches(self) -> None:
        ctl = self.controller
        if ctl is not None:
            ctl.start()
            self.record.note_controller(ctl)
            ctl.pre_switch_start(self)
        self._mn.start()
        bringup.check_bridges(self.runner, self._mn.switches)
        if ctl is not None:
            self._wait_programmed(ctl)

    def _wait_programmed(self, ctl: ControllerHook) -> None:
        ctl.wait_ready([int(s.dpid, 16) for s in self._mn.switches], self.ready_timeout)
        ctl.post_switch_start(self)

    def _configure(self) -> None:
        if not self.offloads:
            bringup.offloads_off(self.runner, self._mn.hosts)
        if self.rps:
            self.rps_mask = cpu_mask(online_cpus())
            bringup.steer_flows(self.runner, self.namespace_interfaces(), self.rps_mask,
                                self.node)
        self.shells.run(self.runner, setup_commands(self.links))
        if hasattr(self.topo, "setup_commands"):
            bringup.run_setup_commands(self.runner, self.topo.setup_commands(), self.node,
                                       self.shells.run)

    # -- access -----------------------------------------------------------------------
    @property
    def _mn(self) -> MnNet:
        """Mininet's network, once built."""
        if self.mn is None:
            raise RunError("this network has not been built")
        return self.mn

    def node(self, name: str) -> MnNode:
        """The Mininet node (host or switch) called name."""
        if self.mn is None or name not in self.mn.nameToNode:
            raise InputError(f"no node named {name!r} in this network")
        return self.mn.nameToNode[name]

    def host(self, name: str) -> MnNode:
        """The Mininet host called name."""
        node = self.node(name)
        if node not in self._mn.hosts:
            raise InputError(f"{name!r} is a switch, not a host")
        return node

    def link(self, name: str) -> linkmodel.NamedLink:
        """The named (shaped) link."""
        return self.link_state.link(name)

    def path_interfaces(self, path: str) -> list[linkmodel.PathInterface]:
        """Every interface on the links whose ``path`` option is path, hosts' first."""
        return linkmodel.path_interfaces(self._planned, set(self.topo.hosts()), path)

    def _in_namespace(self) -> set[str]:
        return {h.name for h in self.mn.hosts if h.inNamespace} if self.mn else set()

    def namespaces(self) -> list[str]:
        """The nodes with a network namespace of their own (hosts and routers), sorted."""
        return sorted(self._in_namespace())

    def namespace_interfaces(self) -> dict[str, list[str]]:
        """The interfaces this network's links made, by the node whose namespace holds
        them ("" for the root namespace: switch ports), in the topology's order."""
        return linkmodel.namespace_interfaces(self._planned, self._in_namespace())

    def monitor_links(self) -> list[LinkCounter]:
        """The shaped link directions whose counters the root namespace can read
        (`testbed.net.monitor.link_counters`)."""
        peer, where = linkmodel.veth_peers(self._planned, self._in_namespace())
        return link_counters(self.links, peer, where)

    def interface_map(self) -> dict[str, dict[str, str | None]]:
        """Host interfaces -> {host, path, addr}, for ``metadata.json``."""
        paths = linkmodel.interface_paths(self._planned)
        out = {}
        for h in self._mn.hosts:
            for intf in h.intfList():
                if intf.name != "lo":
                    out[intf.name] = {"host": h.name, "path": paths.get(intf.name),
                                      "addr": intf.IP()}
        return out

    def describe(self) -> dict[str, dict[str, object]]:
        """The shaped links in base units, for ``metadata.json``."""
        return linkmodel.describe(self.links)

    def tc_dump(self) -> dict[str, str]:
        """``tc -s qdisc show`` of every shaped interface (for ``metadata.json``): one
        ``tc`` per namespace, split by device."""
        return self.link_state.tc_dump(self.runner, self.node)

    def check(self) -> None:
        """Raise `RunError` if the controller died."""
        if self.controller is not None:
            self.controller.check_alive()

    # -- changes ----------------------------------------------------------------------
    def set_shape(self, name: str, shape: LinkShape) -> None:
        """Change the named link to shape with ``tc qdisc change`` (no re-creation)."""
        self.link_state.set_shape(self.runner, name, shape)

    def set_up(self, name: str, up: bool) -> None:
        """Take the named link down or bring it back (``ip link set``)."""
        self.link_state.set_up(self.runner, name, up)

    def apply(self, event: ScheduleEvent) -> bool:
        """Apply a schedule event now: shape changes first, then down/up; whether it
        changed anything."""
        return self.link_state.apply(self.runner, event)

    def prepare_schedule(self, events: Sequence[ScheduleEvent]) -> None:
        """Get ready to apply events on time: start the batch shells they will use, have
        them read their interfaces once, give them a real-time priority (where allowed),
        and run the kernel's change paths once on a throwaway veth.  Under software
        emulation this takes a second or more, so call it before the run's time origin
        is fixed; `play` does it itself otherwise (shells already warmed are skipped)."""
        self.link_state.prepare_schedule(self.runner, events)

    def play(self, events: Sequence[ScheduleEvent], t0: float | None = None,
             log: Path | None = None,
             after: Callable[[ScheduleEvent], None] | None = None) -> SchedulePlayer:
        """Start applying events at ``t0 + at`` in a thread (t0 default: now, taken after
        `prepare_schedule`, which this calls).

        log: the ``events.jsonl`` file (default: ``<workdir>/samples/events.jsonl``);
        after: called with each event once applied (`SchedulePlayer`).
        The player is stopped when the network stops.
        """
        self.prepare_schedule(events)
        if log is None and self.workdir is not None:
            log = self.workdir / "samples" / "events.jsonl"
        return self.link_state.play(self.apply, events, time.time() if t0 is None else t0,
                                    log, at_once=recording(self.runner), after=after)

    def add_nft_table(self, family: str, name: str, body: str) -> None:
        """Create an nftables table (recorded, deleted at stop).

        family: e.g. ``netdev``; name: table name (must not exist yet); body: the
        table's contents (chains and rules) as nft syntax, without the ``table`` line.
        """
        self.add_nft_tables([(family, name, body)])

    def add_nft_tables(self, tables: Sequence[tuple[str, str, str]]) -> None:
        """Create several nftables tables at once: (family, name, body) each, as in
        `add_nft_table` (one ``nft list tables`` and one ``nft -f -`` for all of them)."""
        nftables.add_tables(self.runner, self.record, tables)

    # -- stop -------------------------------------------------------------------------
    def stop(self) -> None:
        """Remove everything this network created (idempotent; never raises for a step)."""
        if self._stopped:
            return
        self._stopped = True
        td = self.teardown
        td.guard_signals()
        try:
            td.step("schedules", self.link_state.stop_players)
            td.step("processes", lambda: td.stop_host_processes(self.runner, self.manifest))
            if self.controller is not None and self._started:
                td.step("controller", self.controller.stop)
            td.step("nftables", lambda: nftables.delete_tables(self.runner, self.record))
            if self.mn is not None:
                mn = self.mn
                td.step("record", lambda: self.record.note_nodes(mn))
                td.step("links", lambda: delete_links(self.runner, mn))
                td.step("mininet", mn.stop)
            before = len(td.errors)
            td.step("leftovers", lambda: td.remove_leftovers(self.manifest, self.runner))
            if len(td.errors) == before:  # else the manifest stays for a later clean-up
                td.step("manifest", self.manifest.discard)
        finally:
            td.restore_signal_handlers()
        deferred = td.deferred_interrupt()
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
        td = self.teardown
        before = len(td.errors)
        td.step("schedules", self.link_state.stop_players)
        td.step("processes", lambda: td.stop_host_processes(self.runner, self.manifest))
        if self.controller is not None:
            td.step("controller", self.controller.stop)
            if len(td.errors) == before:  # else `stop` tries again
                self.controller = None
        td.step("nftables", lambda: nftables.delete_tables(self.runner, self.record))
        self.link_state.forget_run()
        if self.baseline.states is not None:
            td.step("host state", lambda: self.baseline.restore(self.runner,
                                                                list(self._mn.hosts)))
        failed = td.errors[before:]
        if failed:
            raise RunError("the network cannot be reused: " + "; ".join(failed))

    def begin_run(self, runner: CommandRunner, controller: ControllerHook | None = None,
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
            self.record.workdir = Path(workdir)
            self.record.write()
        self.link_state.restore_configured(runner)
        # cold caches, as on a new network: TCP metrics, ARP/neighbours, learned MACs
        mn = self._mn
        self.shells.run(runner, cold_cache_commands(mn.hosts))
        if mn.switches and controller is None:  # standalone bridges learn MACs
            in_parallel(lambda sw: runner.run(["ovs-appctl", "fdb/flush", sw.name],
                                              timeout=30), mn.switches)
        self.controller = controller
        if controller is not None:
            controller.start()
            self.record.note_controller(controller)
            controller.pre_switch_start(self)
            self._wait_programmed(controller)
