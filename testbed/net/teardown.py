"""Taking a network down: each step tried, what failed reported, signals held off.

`Teardown` keeps what a network's clean-up removed (``report``) and which steps failed
(``errors``): a failing step never keeps the next from running.  While the network
runs, SIGINT and SIGTERM become exceptions (KeyboardInterrupt, SystemExit 143); while it
is taken down they are only noted, and raised once the clean-up is over
(`testbed.net.cleanup.deferred_interrupt`), so a second Ctrl-C still leaves nothing
behind.  `Teardown.stop_host_processes`, `delete_links` and `Teardown.remove_leftovers`
are steps of their own (`testbed.net.network.Network.stop` has the order).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType

from testbed.core.commands import CommandRunner
from testbed.core.errors import CommandError
from testbed.net.cleanup import (
    Manifest,
    deferred_interrupt,
    kill_pids,
    parse_link_names,
    pids_in_netns,
    remove_leftovers,
)
from testbed.net.netns import ShellRef, destroy_sockets
from testbed.net.nettypes import MnLink, MnNet

SignalHandler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


class Teardown:
    """A network's clean-up report, its errors, and its signal handling.

    handle_signals: turn SIGINT/SIGTERM into exceptions between `install_signal_handlers`
    and `restore_signal_handlers` (main thread only).
    """

    def __init__(self, handle_signals: bool = True):
        self.handle_signals = handle_signals
        self.report: dict[str, list[str]] = {}
        self.errors: list[str] = []
        self._old_handlers: dict[int, SignalHandler] = {}

    def step(self, what: str, fn: Callable[[], object]) -> None:
        """Run one clean-up step; an error is noted as ``"<what>: <error>"``."""
        try:
            fn()
        except Exception as exc:  # keep cleaning; report at the end
            self.errors.append(f"{what}: {exc}")

    def stop_host_processes(self, runner: CommandRunner, manifest: Manifest) -> None:
        """Stop runner's processes in the manifest's hosts, then kill any other process
        in their namespaces (its shells aside), reported under ``processes``, then
        destroy the TCP sockets those left (`destroy_sockets`), under ``sockets``."""
        names = set(manifest.hosts)
        for proc in runner.running():
            if proc.where in names:
                proc.stop()
        shells = set(manifest.hosts.values()) | set(manifest.switches.values())
        strays = pids_in_netns(set(manifest.netns.values()), exclude=shells)
        if strays:
            self.report["processes"] = [str(p) for p in kill_pids(strays)]
        sockets = destroy_sockets(runner, [ShellRef(name, pid) for name, pid
                                           in sorted(manifest.hosts.items())])
        if sockets:
            self.report["sockets"] = sockets

    def remove_leftovers(self, manifest: Manifest, runner: CommandRunner) -> None:
        """Remove whatever of the manifest still exists (`testbed.net.cleanup.
        remove_leftovers`), added to the report."""
        for k, v in remove_leftovers(manifest, runner).items():
            self.report.setdefault(k, []).extend(v)

    # -- signals ----------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """SIGINT -> KeyboardInterrupt, SIGTERM -> SystemExit(143), from now on."""
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return

        def raise_on(signum: int, _frame: FrameType | None) -> None:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise SystemExit(128 + signum)

        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old_handlers[sig] = signal.signal(sig, raise_on)

    def guard_signals(self) -> None:
        """While cleaning up, a second Ctrl-C or SIGTERM must not cut the clean-up short."""
        if not self._old_handlers:
            return
        for sig in self._old_handlers:
            signal.signal(sig, lambda signum, _f: self.report.setdefault(
                "signals_during_cleanup", []).append(str(signum)))

    def restore_signal_handlers(self) -> None:
        """The handlers from before `install_signal_handlers` back."""
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers.clear()

    def deferred_interrupt(self) -> BaseException | None:
        """The exception a signal noted during the clean-up raises now (None: none)."""
        return deferred_interrupt(self.report.get("signals_during_cleanup", []))


def delete_links(runner: CommandRunner, mn: MnNet) -> None:
    """Delete every veth with an end in the root namespace in one ``ip -batch``
    (Mininet would start ``ip link del`` once per link); Mininet deletes the rest."""
    ends: dict[str, MnLink] = {}
    for link in mn.links:
        for intf in (link.intf1, link.intf2):
            if intf is not None and not getattr(intf.node, "inNamespace", True):
                ends[intf.name] = link
                break
    if not ends:
        return
    shell = runner.batch_shell("ip")
    try:
        shell.run([["ip", "link", "del", "dev", name] for name in ends])
    except CommandError:
        pass  # one already gone; whatever is left is deleted by name below
    finally:
        shell.stop()
    existing = set(parse_link_names(runner.run(["ip", "-o", "link", "show"],
                                               record=False).stdout))
    from testbed.net.mininet_nodes import mark_link_deleted

    for name, link in ends.items():
        if name not in existing:
            mark_link_deleted(link)  # `QuickIntf.delete` has nothing left to do
