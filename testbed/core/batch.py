"""Batch shells: a long-lived ``tc -batch`` / ``ip -batch`` per namespace.

A link change must land within milliseconds of its planned time, and starting a program
costs a fork and an exec (about 0.4 s each in a software-emulated VM).  A `BatchShell`
is started once (`testbed.core.commands.CommandRunner.batch_shell`) and fed commands as
lines; `run_batches` feeds several namespaces at once.  Every command is recorded in the
runner's transcript as if it had run on its own.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Sequence

from testbed.core.errors import CommandError, CommandTimeout, MissingFeatureError
from testbed.core.process import Process, ProcessOwner, realtime_priority
from testbed.core.transcript import STDERR_TAIL, Namespaced, TranscriptEntry, in_namespace

# a line that always fails, in user space: an object neither tool knows (see `BatchShell`).
# Not a missing device: the kernel would then try to load a module named after it
# ("netdev-<name>"), which runs modprobe and takes about 0.5 s in an emulated VM.
BATCH_SENTINEL = {"tc": "tb-ack", "ip": "tb-ack"}


def batch_text(cmds: Sequence[Sequence[str]]) -> str:
    """Commands of one program (all ``tc`` or all ``ip``) as ``-batch`` input lines."""
    if not cmds:
        return ""
    prog = cmds[0][0]
    lines = []
    for argv in cmds:
        if argv[0] != prog:
            raise ValueError(f"batch mixes {prog!r} and {argv[0]!r}")
        if any((not a) or any(c.isspace() for c in a) for a in argv):
            raise ValueError(f"batch argument with whitespace in {argv!r}")
        lines.append(" ".join(argv[1:]))
    return "\n".join(lines) + "\n"


class BatchShell:
    """A long-lived ``tc -force -batch -`` or ``ip -force -batch -`` in one namespace.

    Starting a program costs a fork and an exec (about 0.4 s each in a software-emulated
    VM), too slow for link changes that must land within milliseconds of their planned
    time.  A batch shell is started once; `run` writes the commands as lines to its stdin
    and returns when iproute2 has executed them.  Completion is confirmed by a sentinel
    line that always fails (an unknown object, ``tb-ack``): iproute2 reports
    ``Command failed -:N`` on stderr for every failing line, in order, so the sentinel's
    report means every earlier line has been executed, and the reports before it name
    the lines that failed.  Each command is recorded in the transcript as
    if it had been run on its own.
    """

    def __init__(self, runner: ProcessOwner, tool: str, host: Namespaced | None = None):
        if tool not in BATCH_SENTINEL:
            raise ValueError(f"no batch shell for {tool!r}")
        self.tool = tool
        self.host = host
        self._runner = runner
        self._where = host.name if host is not None else "root"
        self._line = 0
        self._lock = threading.Lock()
        self._buf = b""
        argv = in_namespace([tool, "-force", "-batch", "-"], host)
        self.process = self._start(argv)
        runner.track(self.process)
        runner.transcript.add(TranscriptEntry(time.time(), argv, self._where, None, 0.0,
                                              kind="batch"))

    def _start(self, argv: list[str]) -> Process:
        """Start the ``-batch`` process (a recording shell records it instead)."""
        try:
            popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, bufsize=0, start_new_session=True)
        except FileNotFoundError as exc:
            raise MissingFeatureError(
                f"'{argv[0]}' is not installed; run `make install` (scripts/install)") from exc
        return Process(popen, argv, self._where, self._runner, None)

    def running(self) -> bool:
        return self.process.running()

    def run(self, cmds: Sequence[Sequence[str]], timeout: float = 10.0) -> float:
        """Execute cmds (each starting with this shell's tool); return the wall time when
        the last one had been executed.  Raises `CommandError` naming the first failing
        command, `CommandTimeout` if the shell does not answer within timeout."""
        return run_batches([(self, cmds)], timeout)

    def realtime(self) -> bool:
        """Run this shell with a real-time priority where allowed (for the shells a link
        schedule uses: they sleep until an event, then must run at once)."""
        return realtime_priority(self.process.pid)

    def _lines(self, cmds: Sequence[Sequence[str]]) -> list[str]:
        """cmds as batch lines; ValueError for a command of another tool."""
        for argv in cmds:
            if not argv or argv[0] != self.tool:
                raise ValueError(f"{self.tool} batch shell given {list(argv)!r}")
        return batch_text(cmds).splitlines()

    def _send(self, lines: list[str]) -> tuple[int, int, float]:
        """Write lines and the sentinel (the caller holds the lock); return
        (first line number, sentinel line number, time sent)."""
        first = self._line + 1
        self._line += len(lines) + 1
        t0 = time.time()
        popen = self.process.popen
        assert popen.stdin is not None
        try:
            popen.stdin.write(("\n".join([*lines, BATCH_SENTINEL[self.tool]]) + "\n").encode())
        except BrokenPipeError as exc:
            raise CommandError(self.process.argv, popen.poll() or -1,
                               "the batch shell has exited", self._where) from exc
        return first, self._line, t0

    def _collect(self, cmds: Sequence[Sequence[str]], first: int, sentinel: int, t0: float,
                 deadline: float, at: float | None = None) -> float:
        """Read the shell's reports up to the sentinel (the caller holds the lock), record
        cmds in the transcript (at: the time on the run's clock they were planned for);
        return the time the sentinel was seen."""
        import select

        popen = self.process.popen
        assert popen.stderr is not None
        failed: dict[int, str] = {}
        message: list[str] = []
        while True:
            while b"\n" not in self._buf:
                left = deadline - time.time()
                ready = select.select([popen.stderr], [], [], max(left, 0))[0]
                chunk = popen.stderr.read(65536) if ready else b""
                if not chunk:
                    self.process.stop()
                    why = "no answer" if not ready else "the batch shell exited"
                    raise CommandTimeout(self.process.argv, deadline - t0, why, self._where)
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\n", 1)
            text = raw.decode(errors="replace")
            if text.startswith("Command failed -:"):
                n = int(text.rsplit(":", 1)[1])
                if n == sentinel:
                    break
                failed[n] = "\n".join(message)
                message = []
            else:
                message.append(text)
        t_done = time.time()
        dur = t_done - t0
        for i, argv in enumerate(cmds):
            rc = 1 if first + i in failed else 0
            self._runner.transcript.add(TranscriptEntry(
                t0, in_namespace(argv, self.host), self._where, rc, dur,
                stderr_tail=failed.get(first + i, "")[-STDERR_TAIL:], at=at))
        for i, argv in enumerate(cmds):
            if first + i in failed:
                raise CommandError(in_namespace(argv, self.host), 1,
                                   failed[first + i][-STDERR_TAIL:], self._where)
        return t_done

    def stop(self) -> None:
        if self.process.popen.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.popen.stdin.close()
        self.process.stop()
        if self.process.popen.stderr is not None:
            self.process.popen.stderr.close()


def run_batches(jobs: Sequence[tuple[BatchShell, Sequence[Sequence[str]]]],
                timeout: float = 10.0, at: float | None = None) -> float:
    """Execute each (shell, cmds) job, all shells working at once: every job is written
    before any answer is awaited, so a change spanning several namespaces costs one
    round trip, not one per namespace.  Returns the wall time when the last command had
    been executed (at: the run-clock time they were planned for, for the transcript).
    Raises as `BatchShell.run` does (the first failing job, in order)."""
    shells = sorted({id(sh): sh for sh, _ in jobs}.values(), key=id)  # one lock order
    if len(shells) != len(jobs):
        raise ValueError("one job per batch shell")
    with contextlib.ExitStack() as held:
        for sh in shells:
            held.enter_context(sh._lock)
        lines = [sh._lines(cmds) for sh, cmds in jobs]  # every job checked before any runs
        sent = []
        error: Exception | None = None
        for (sh, cmds), text in zip(jobs, lines, strict=True):
            try:
                sent.append((sh, cmds, *sh._send(text)))
            except CommandError as exc:  # that shell has exited: read the others, then raise
                error = exc
                break
        deadline = time.time() + timeout
        done = 0.0
        for sh, cmds, first, sentinel, t0 in sent:
            try:  # read every shell to its sentinel, even after a failure
                done = max(done, sh._collect(cmds, first, sentinel, t0, deadline, at))
            except CommandError as exc:
                error = error or exc
        if error is not None:
            raise error
        return done

