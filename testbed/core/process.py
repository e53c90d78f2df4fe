"""A background process started by a `testbed.core.commands.CommandRunner`, and the
real-time priority that the processes and threads which must act on time ask for.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import IO, Protocol

from testbed.core.errors import CommandTimeout
from testbed.core.transcript import Transcript, TranscriptEntry


class ProcessOwner(Protocol):
    """What starts background processes and keeps count of them (a
    `testbed.core.commands.CommandRunner`): its transcript, and its list of the processes
    still running."""

    transcript: Transcript

    def track(self, proc: Process) -> None: ...
    def forget(self, proc: Process) -> None: ...


class Process:
    """A background process started by `CommandRunner.spawn`; stop it with `stop()`."""

    def __init__(self, popen: subprocess.Popen, argv: list[str], where: str,
                 runner: ProcessOwner, log: IO | None):
        self.popen = popen
        self.argv = argv
        self.where = where
        self._runner = runner
        self._log = log

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the process to exit; return its exit status."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise CommandTimeout(self.argv, timeout or 0, where=self.where) from exc

    def send(self, sig: int) -> bool:
        """Send sig to this process (by its PID) without waiting; False if it has exited."""
        if self.popen.poll() is not None:
            return False
        try:
            self.popen.send_signal(sig)
        except ProcessLookupError:
            return False
        return True

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 5.0) -> int | None:
        """Signal the process (SIGTERM by default), wait, then SIGKILL if needed.

        Only this process (by its PID) is signalled, never a pattern.
        """
        rc = self.popen.poll()
        if rc is None:
            try:
                self.popen.send_signal(sig)
                rc = self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                rc = self.popen.wait(timeout=timeout)
            except ProcessLookupError:
                rc = self.popen.poll()
        if self._log is not None and not self._log.closed:
            self._log.close()
        self._runner.forget(self)
        self._runner.transcript.add(TranscriptEntry(time.time(), self.argv, self.where, rc, 0.0,
                                                    kind="stop"))
        return rc


REALTIME_PRIORITY = 10  # SCHED_FIFO priority of the player thread and the batch shells


def realtime_priority(pid: int) -> bool:
    """Give pid (0: the calling thread) a real-time (SCHED_FIFO) priority where allowed.

    A link change must land within milliseconds of its planned time, but on a loaded or
    software-emulated machine a woken thread waits behind the traffic generators and
    tcpdump for a CPU (events 50-54 ms late were seen in the VM).  Both the player and
    the ``ip``/``tc`` batch shells sleep until there is work, so the priority costs the
    rest nothing.  Without the right to do so (not root) nothing changes; returns
    whether it took.
    """
    try:
        os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(REALTIME_PRIORITY))
    except (AttributeError, OSError):
        return False
    return True
