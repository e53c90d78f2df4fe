"""The named links' shape and up/down state, and changing them on time.

`LinkState` holds each `NamedLink`'s current shape and state and turns a change into
``tc qdisc change`` (never re-creation; `testbed.net.shaping` builds the argument lists)
or ``ip link set`` on the link's egress / root-namespace ends.  Changes go through
`BatchShells`: one long-lived ``tc -batch`` / ``ip -batch`` per namespace, every
namespace's shell working at once, so a change costs no program start.  A schedule
(`play`) runs in a `SchedulePlayer` thread; `prepare_schedule` readies its shells and
the kernel's change paths beforehand, so the first events land on time.

Every method takes the `CommandRunner` to use: a kept network gets each run's own.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from testbed.core.batch import BatchShell, run_batches
from testbed.core.commands import CommandRunner
from testbed.core.errors import InputError
from testbed.net import shaping as sh
from testbed.net.nettypes import NodeLookup
from testbed.net.record import NetworkRecord
from testbed.net.schedule import SchedulePlayer
from testbed.plan.links import NamedLink
from testbed.spec.linkshape import LinkShape
from testbed.spec.model import ScheduleEvent

PerNode = dict[str, list[list[str]]]
"""Commands by the node whose namespace runs them ("" for the root namespace)."""


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


def setup_commands(links: dict[str, NamedLink]) -> PerNode:
    """The tc commands that build every shaped egress's qdisc tree, by namespace."""
    per_node: PerNode = {}
    for link in links.values():
        for eg in link.egress:
            per_node.setdefault(eg.namespace, []).extend(sh.setup_commands(eg.intf, link.shape))
    return per_node


class BatchShells:
    """The network's long-lived ``tc``/``ip`` batch shells, one per (namespace, tool).

    node: finds the node a namespace belongs to."""

    def __init__(self, node: NodeLookup):
        self._node = node
        self._shells: dict[tuple[str, str], BatchShell] = {}

    def shell(self, runner: CommandRunner, node: str | None, tool: str) -> BatchShell:
        """The long-lived ``tool -batch`` process for node (None: the root namespace)."""
        key = (node or "", tool)
        shell = self._shells.get(key)
        if shell is None or not shell.running():
            shell = runner.batch_shell(tool, self._node(node) if node else None)
            self._shells[key] = shell
        return shell

    def run(self, runner: CommandRunner, per_node: PerNode, at: float | None = None) -> None:
        """Run tc / ip commands through the nodes' batch shells (no fork per change),
        every shell at once.  per_node: {node name or "" for the root namespace: argvs};
        at: the run-clock time a schedule planned them for (kept in the transcript)."""
        jobs = []
        for node, cmds in per_node.items():
            for tool in sorted({c[0] for c in cmds}):
                jobs.append((self.shell(runner, node or None, tool),
                             [c for c in cmds if c[0] == tool]))
        if jobs:
            run_batches(jobs, at=at)

    def stop(self) -> None:
        """Stop every shell."""
        for shell in self._shells.values():
            shell.stop()
        self._shells.clear()

    def forget(self) -> None:
        """Forget the shells without stopping them (their runner stops them)."""
        self._shells.clear()


class LinkState:
    """The named links as they are now, and the means to change them.

    links: the topology's `NamedLink`s (changed in place); shells: the network's batch
    shells; record: its manifest (the throwaway veth of `prepare_schedule` is noted
    there while it exists).
    """

    def __init__(self, links: dict[str, NamedLink], shells: BatchShells,
                 record: NetworkRecord):
        self.links = links
        # what every link is configured as, for `restore_configured` to undo a schedule
        self._configured = {n: (link.shape, link.up) for n, link in links.items()}
        self._shells = shells
        self._record = record
        self._lock = threading.Lock()
        self._warmed = False
        self._schedule_shells: list[BatchShell] = []  # warmed and real-time
        self._players: list[SchedulePlayer] = []

    def link(self, name: str) -> NamedLink:
        """The named (shaped) link."""
        if name not in self.links:
            known = ", ".join(sorted(self.links)) or "none"
            raise InputError(f"no shaped link named {name!r}; this network has {known}")
        return self.links[name]

    # -- changes ----------------------------------------------------------------------
    def set_shape(self, runner: CommandRunner, name: str, shape: LinkShape,
                  at: float | None = None) -> None:
        """Change the named link to shape with ``tc qdisc change`` (no re-creation); at:
        the schedule's time for it, if any."""
        link = self.link(name)
        with self._lock:
            per_node: PerNode = {}
            for eg in link.egress:
                per_node.setdefault(eg.namespace, []).extend(
                    sh.change_commands(eg.intf, link.shape, shape))
            self._shells.run(runner, per_node, at)
            link.shape = shape

    def set_up(self, runner: CommandRunner, name: str, up: bool,
               at: float | None = None) -> None:
        """Take the named link down or bring it back (``ip link set``); at: as in
        `set_shape`."""
        link = self.link(name)
        with self._lock:
            per_node: PerNode = {}
            for eg in link.updown:
                per_node.setdefault(eg.namespace, []).append(sh.link_state_command(eg.intf, up))
            self._shells.run(runner, per_node, at)
            link.up = up

    def apply(self, runner: CommandRunner, event: ScheduleEvent) -> bool:
        """Apply a schedule event now: shape changes first, then down/up.  Returns whether
        it changed anything (a trace's row may repeat the rate the link has)."""
        link = self.link(event.link)
        new = event.apply_to(link.shape)
        changed = False
        if new != link.shape:
            self.set_shape(runner, event.link, new, at=event.at)
            changed = True
        if event.link_up is not None and event.link_up != link.up:
            self.set_up(runner, event.link, event.link_up, at=event.at)
            changed = True
        return changed

    def restore_configured(self, runner: CommandRunner) -> None:
        """Give every link that a schedule changed its configured shape and state back."""
        for name, (shape, up) in self._configured.items():
            link = self.links[name]
            if link.shape != shape:
                self.set_shape(runner, name, shape)
            if link.up != up:
                self.set_up(runner, name, up)

    # -- schedules --------------------------------------------------------------------
    def prepare_schedule(self, runner: CommandRunner, events: Sequence[ScheduleEvent]
                         ) -> None:
        """Get ready to apply events on time (see `testbed.net.network.Network.
        prepare_schedule`); shells already warmed are skipped."""
        warm: dict[tuple[str | None, str], list[list[str]]] = {}
        for ev in events:
            link = self.link(ev.link)
            # the first use of a code path is slow in an emulated VM (about 0.2 s), later
            # ones are not
            for eg in link.egress:
                warm.setdefault((eg.namespace or None, "tc"), []).append(
                    ["tc", "qdisc", "show", "dev", eg.intf])
            for eg in link.updown:
                warm.setdefault((eg.namespace or None, "ip"), []).append(
                    ["ip", "link", "show", "dev", eg.intf])
        if events and not self._warmed:
            self._warm_kernel_paths(runner)
        for (node, tool), cmds in warm.items():
            shell = self._shells.shell(runner, node, tool)
            if shell not in self._schedule_shells:  # new (or restarted): warm it up
                shell.run(list({tuple(c): c for c in cmds}.values()))
                shell.realtime()  # it sleeps until an event, then must run at once
                self._schedule_shells.append(shell)

    def play(self, apply: Callable[[ScheduleEvent], None], events: Sequence[ScheduleEvent],
             t0: float, log: Path | None, at_once: bool = False,
             after: Callable[[ScheduleEvent], None] | None = None) -> SchedulePlayer:
        """Start a `SchedulePlayer` that calls apply with each event at ``t0 + at``
        (`prepare_schedule` first); it is stopped by `stop_players`.  at_once: a dry run:
        every event is due now, and they are applied, in order, before this returns;
        after: see `SchedulePlayer`."""
        end = t0 + max((e.at for e in events), default=0.0) + 1.0
        player = SchedulePlayer(apply, events, t0, log,
                                clock=(lambda: end) if at_once else time.time, after=after)
        self._players.append(player)
        player.start()
        if at_once:
            player.join()
        return player

    def stop_players(self) -> None:
        """Stop every schedule player, then every batch shell."""
        for p in self._players:
            p.stop()
        self._shells.stop()
        self._schedule_shells.clear()

    def forget_run(self) -> None:
        """Forget the players and shells of a run that is over (`stop_players` ran)."""
        self._players.clear()
        self._shells.forget()
        self._schedule_shells.clear()

    def _warm_kernel_paths(self, runner: CommandRunner) -> None:
        """Change a qdisc tree and take a link down and up once, on a throwaway veth pair.

        The first time the kernel (and iproute2) runs a code path it is slow in a
        software-emulated VM: a first ``ip link set down`` took 60 ms there, later ones
        5 ms.  Doing it once here, on interfaces no traffic uses, keeps a schedule's
        first events on time.  The pair is in the manifest while it exists.
        """
        self._warmed = True
        a, b = f"tbw{os.getpid() % 100000}a", f"tbw{os.getpid() % 100000}b"
        self._record.manifest.interfaces.append(a)
        self._record.write()
        tc, ip = self._shells.shell(runner, None, "tc"), self._shells.shell(runner, None, "ip")
        one = LinkShape(bw_bps=10_000_000, delay_s=0.01, loss_pct=1.0, queue_pkts=100)
        two = one.changed(bw_bps=2_000_000, delay_s=0.02, loss_pct=0.0)
        try:
            runner.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b])
            ip.run([["ip", "link", "set", "dev", a, "alias", self._record.manifest.label],
                    ["ip", "link", "set", "dev", a, "up"], ["ip", "link", "set", "dev", b, "up"]])
            tc.run(sh.setup_commands(a, one))
            tc.run(sh.change_commands(a, one, two))
            ip.run([["ip", "link", "set", "dev", a, "down"], ["ip", "link", "set", "dev", a, "up"]])
        finally:
            runner.run(["ip", "link", "del", "dev", a], check=False)
            self._record.manifest.interfaces.remove(a)
            self._record.write()

    # -- reading ----------------------------------------------------------------------
    def tc_dump(self, runner: CommandRunner, node: NodeLookup) -> dict[str, str]:
        """``tc -s qdisc show`` of every shaped interface: one ``tc`` per namespace,
        split by device.  node: finds a namespace's node."""
        where: dict[str, list[str]] = {}
        for link in self.links.values():
            for eg in link.egress:
                where.setdefault(eg.namespace, []).append(eg.intf)
        out = {}
        for name, intfs in where.items():
            text = runner.run(["tc", "-s", "qdisc", "show"], record=False,
                              host=node(name) if name else None).stdout
            blocks = split_qdisc_dump(text)
            for intf in intfs:
                out[intf] = blocks.get(intf, "")
        return out
