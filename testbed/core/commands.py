"""The one place that runs subprocesses.

Every command is an argument list (never a shell string), runs with a timeout, and is
recorded in a transcript that goes into the result bundle, so a user can replay any
step by hand.  A command can run inside a Mininet host's namespaces (``host=``): it is
then prefixed with ``mnexec -a <pid>``, Mininet's own namespace-attach helper.

Typical use::

    runner = CommandRunner()
    out = runner.run(["tc", "qdisc", "show"]).stdout
    proc = runner.spawn(["tcpdump", "-i", "h1-eth0", "-w", "x.pcap"], host=h1, log=path)
    ...
    proc.stop()
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Protocol, TypeVar

from testbed.core.errors import CommandError, CommandTimeout, MissingFeatureError

DEFAULT_TIMEOUT = 60.0
# a line that always fails, in user space: an object neither tool knows (see `BatchShell`).
# Not a missing device: the kernel would then try to load a module named after it
# ("netdev-<name>"), which runs modprobe and takes about 0.5 s in an emulated VM.
BATCH_SENTINEL = {"tc": "tb-ack", "ip": "tb-ack"}
STDERR_TAIL = 2000


class Namespaced(Protocol):
    """Anything with a name and the pid of a process inside its namespaces (a Mininet Node)."""

    name: str
    pid: int


@dataclass
class Result:
    """The outcome of a finished command."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    duration: float


@dataclass
class TranscriptEntry:
    """One line of the transcript: what ran, where, when and how it ended."""

    t_wall: float
    argv: list[str]
    where: str
    returncode: int | None
    duration: float
    kind: str = "run"  # run | spawn | stop | dry-run | batch (a `BatchShell` started)
    stderr_tail: str = ""
    input: str | None = None  # what was fed to stdin (``nft -f -``, ``tc -batch -``)
    at: float | None = None  # planned time on the run's clock (s), for scheduled commands


@dataclass
class Transcript:
    """An append-only, thread-safe log of every command the runner handled."""

    entries: list[TranscriptEntry] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, entry: TranscriptEntry) -> None:
        with self._lock:
            self.entries.append(entry)

    def to_jsonl(self) -> str:
        with self._lock:
            return "".join(json.dumps(asdict(e)) + "\n" for e in self.entries)

    def as_shell(self) -> str:
        """The transcript as a replayable shell script, in order.

        One command a line; a command fed on stdin (``nft -f -``, ``tc -force -batch -``)
        is followed by its input as a here-document; commands planned for a time on the
        run's clock (a link schedule) come under a ``# at t = 12s`` line.  Commands inside
        a Mininet host are commented out with ``# in <host>:`` (its namespace exists only
        while the run does).
        """
        lines = ["#!/bin/sh", "# commands run by the testbed, in order"]
        at: float | None = None
        with self._lock:
            for e in self.entries:
                if e.kind in ("stop", "batch"):  # a batch shell's commands are listed one by one
                    continue
                if e.at is not None and e.at != at:
                    lines.append(f"# at t = {e.at:g}s on the run's clock (after its start):")
                at = e.at if e.at is not None else at
                lines.extend(shell_lines(e))
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> None:
        path.write_text(self.to_jsonl())


def shell_lines(entry: TranscriptEntry) -> list[str]:
    """One transcript entry as shell lines: the command, and its stdin as a here-document.

    Commands in a host's namespace are commented out (``# in client: ...``), their input
    lines too, so that the script stays valid.
    """
    import shlex

    comment = "" if entry.where == "root" else "# "
    prefix = "" if entry.where == "root" else f"# in {entry.where}: "
    suffix = " &" if entry.kind == "spawn" else ""
    if entry.input is None:
        return [prefix + shlex.join(entry.argv) + suffix]
    body = entry.input.splitlines()
    tag = "EOF"
    while tag in body:
        tag += "_"
    return [f"{prefix}{shlex.join(entry.argv)} <<'{tag}'{suffix}",
            *(comment + line for line in body), comment + tag]


def in_namespace(argv: Sequence[str], host: Namespaced | None) -> list[str]:
    """Prefix argv so that it runs in host's network and mount namespaces.

    argv: the command; host: a Mininet node (or None for the root namespace).
    """
    if host is None:
        return list(argv)
    return ["mnexec", "-a", str(host.pid), *argv]


class Process:
    """A background process started by `CommandRunner.spawn`; stop it with `stop()`."""

    def __init__(self, popen: subprocess.Popen, argv: list[str], where: str,
                 runner: CommandRunner, log: IO | None):
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
        self._runner._forget(self)
        self._runner.transcript.add(TranscriptEntry(time.time(), self.argv, self.where, rc, 0.0,
                                                    kind="stop"))
        return rc


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

    def __init__(self, runner: CommandRunner, tool: str, host: Namespaced | None = None):
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
        try:
            popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, bufsize=0, start_new_session=True)
        except FileNotFoundError as exc:
            raise MissingFeatureError(
                f"'{argv[0]}' is not installed; run `make install` (scripts/install)") from exc
        self.process = Process(popen, argv, self._where, runner, None)
        runner._track(self.process)
        runner.transcript.add(TranscriptEntry(time.time(), argv, self._where, None, 0.0,
                                              kind="batch"))

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
                 deadline: float) -> float:
        """Read the shell's reports up to the sentinel (the caller holds the lock), record
        cmds in the transcript; return the time the sentinel was seen."""
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
                stderr_tail=failed.get(first + i, "")[-STDERR_TAIL:]))
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
                timeout: float = 10.0) -> float:
    """Execute each (shell, cmds) job, all shells working at once: every job is written
    before any answer is awaited, so a change spanning several namespaces costs one
    round trip, not one per namespace.  Returns the wall time when the last command had
    been executed.  Raises as `BatchShell.run` does (the first failing job, in order)."""
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
                done = max(done, sh._collect(cmds, first, sentinel, t0, deadline))
            except CommandError as exc:
                error = error or exc
        if error is not None:
            raise error
        return done


class CommandRunner:
    """Runs commands as argument lists, with timeouts, raising `CommandError` on failure.

    dry_run: record commands without running them (for ``testbed run --dry-run``).
    """

    def __init__(self, dry_run: bool = False, default_timeout: float = DEFAULT_TIMEOUT):
        self.dry_run = dry_run
        self.default_timeout = default_timeout
        self.transcript = Transcript()
        self._procs: list[Process] = []
        self._lock = threading.Lock()

    # -- foreground ---------------------------------------------------------------------
    def run(self, argv: Sequence[str], *, host: Namespaced | None = None,
            timeout: float | None = None, check: bool = True, input: str | None = None,
            env: dict[str, str] | None = None, record: bool = True,
            at: float | None = None) -> Result:
        """Run argv to completion and return its `Result`.

        host: run inside this Mininet node's namespaces; timeout: seconds (default 60);
        check: raise `CommandError` on a non-zero exit; input: text fed to stdin (kept in
        the transcript); record: add the command to the transcript (off for polling
        loops); at: the time on the run's clock the command is planned for (a schedule's
        commands; shown in the transcript and the dry-run script).
        """
        full = in_namespace(argv, host)
        where = host.name if host is not None else "root"
        t0 = time.time()
        if self.dry_run:
            self.transcript.add(TranscriptEntry(t0, full, where, None, 0.0, kind="dry-run",
                                                input=input, at=at))
            return Result(full, 0, "", "", 0.0)
        tmo = self.default_timeout if timeout is None else timeout
        try:
            cp = subprocess.run(full, capture_output=True, text=True, timeout=tmo, input=input,
                                env=env, errors="replace",
                                stdin=None if input is not None else subprocess.DEVNULL)
        except FileNotFoundError as exc:
            raise MissingFeatureError(
                f"'{full[0]}' is not installed; run `make install` (scripts/install)") from exc
        except subprocess.TimeoutExpired as exc:
            err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
            if record:
                self.transcript.add(TranscriptEntry(t0, full, where, None, time.time() - t0,
                                                    stderr_tail=err[-STDERR_TAIL:],
                                                    input=input, at=at))
            raise CommandTimeout(full, tmo, err[-STDERR_TAIL:], where) from exc
        dur = time.time() - t0
        if record:
            self.transcript.add(TranscriptEntry(t0, full, where, cp.returncode, dur,
                                                stderr_tail=cp.stderr[-STDERR_TAIL:]
                                                if cp.returncode else "",
                                                input=input, at=at))
        if check and cp.returncode != 0:
            raise CommandError(full, cp.returncode, cp.stderr[-STDERR_TAIL:], where)
        return Result(full, cp.returncode, cp.stdout, cp.stderr, dur)

    def call(self, argv: Sequence[str], *, host: Namespaced | None = None,
             env: dict[str, str] | None = None, timeout: float | None = None,
             relay: bool = False) -> int:
        """Run argv with its output streamed to ours (not captured); return its exit code.

        For long interactive steps (a VM, a nested CLI). host/env/timeout as in `run`;
        timeout None waits forever; relay: copy the child's stdout+stderr through a pipe
        (for children such as qemu that reopen their stdout and would overwrite a file);
        a relayed child gets no stdin and its own process group, which an interrupt
        (KeyboardInterrupt, or SIGTERM turned into one) stops as a whole.
        """
        full = in_namespace(argv, host)
        where = host.name if host is not None else "root"
        t0 = time.time()
        if self.dry_run:
            self.transcript.add(TranscriptEntry(t0, full, where, None, 0.0, kind="dry-run"))
            return 0
        try:
            # relay: a process tree (vng -> virtme-run -> qemu) in a group of its own, so
            # an interrupt stops all of it, not just its first process
            proc = subprocess.Popen(full, env=env,
                                    stdin=subprocess.DEVNULL if relay else None,
                                    stdout=subprocess.PIPE if relay else None,
                                    stderr=subprocess.STDOUT if relay else None,
                                    process_group=0 if relay else None)
        except FileNotFoundError as exc:
            raise MissingFeatureError(
                f"'{full[0]}' is not installed; run `make install` (scripts/install)") from exc
        try:
            if relay and proc.stdout is not None:
                out = sys.stdout.buffer
                for chunk in iter(lambda: proc.stdout.read1(65536), b""):
                    out.write(chunk)
                    out.flush()
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            proc.wait()
            raise CommandTimeout(full, timeout or 0, where=where) from exc
        except KeyboardInterrupt:
            _signal_tree(proc, signal.SIGTERM, group=relay)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _signal_tree(proc, signal.SIGKILL, group=relay)
            raise
        self.transcript.add(TranscriptEntry(t0, full, where, rc, time.time() - t0, kind="run"))
        return rc

    def ok(self, argv: Sequence[str], **kw) -> bool:
        """True when argv exits 0 (never raises for a non-zero exit or a missing program)."""
        try:
            return self.run(argv, check=False, **kw).returncode == 0
        except (MissingFeatureError, CommandTimeout):
            return False

    # -- background ---------------------------------------------------------------------
    def spawn(self, argv: Sequence[str], *, host: Namespaced | None = None,
              log: Path | None = None, stdout: Path | None = None,
              env: dict[str, str] | None = None) -> Process:
        """Start argv in the background and track it until `Process.stop`.

        log: file for stderr (and stdout unless ``stdout`` is given); stdout: separate file.
        """
        full = in_namespace(argv, host)
        where = host.name if host is not None else "root"
        t0 = time.time()
        if self.dry_run:
            self.transcript.add(TranscriptEntry(t0, full, where, None, 0.0, kind="dry-run"))
            popen = subprocess.Popen(["true"])
            return Process(popen, full, where, self, None)
        logf = open(log, "ab") if log is not None else None  # noqa: SIM115
        outf = open(stdout, "wb") if stdout is not None else None  # noqa: SIM115
        try:
            popen = subprocess.Popen(
                full, stdin=subprocess.DEVNULL,
                stdout=outf if outf is not None else (logf or subprocess.DEVNULL),
                stderr=logf or subprocess.DEVNULL, env=env, start_new_session=True)
        except FileNotFoundError as exc:
            for f in (logf, outf):
                if f:
                    f.close()
            raise MissingFeatureError(
                f"'{full[0]}' is not installed; run `make install` (scripts/install)") from exc
        if outf is not None:
            outf.close()  # the child holds its own descriptor
        proc = Process(popen, full, where, self, logf)
        with self._lock:
            self._procs.append(proc)
        self.transcript.add(TranscriptEntry(t0, full, where, None, 0.0, kind="spawn"))
        return proc

    def batch_shell(self, tool: str, host: Namespaced | None = None) -> BatchShell:
        """A long-lived ``tc``/``ip`` batch process in host's namespaces (see `BatchShell`)."""
        return BatchShell(self, tool, host)

    def _track(self, proc: Process) -> None:
        with self._lock:
            self._procs.append(proc)

    def _forget(self, proc: Process) -> None:
        with self._lock:
            if proc in self._procs:
                self._procs.remove(proc)

    def running(self) -> list[Process]:
        """Background processes started here and not yet stopped."""
        with self._lock:
            return list(self._procs)

    def stop_all(self, timeout: float = 5.0) -> None:
        """Stop every background process this runner started (newest first)."""
        for proc in reversed(self.running()):
            proc.stop(timeout=timeout)


def _signal_tree(proc: subprocess.Popen, sig: int, group: bool) -> None:
    """Send sig to proc, or to its whole process group when it leads one."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)


def which(program: str) -> str | None:
    """Path of program on PATH (also looking in the sbin directories), or None."""
    extra = os.pathsep.join(["/usr/local/sbin", "/usr/sbin", "/sbin"])
    return shutil.which(program, path=os.environ.get("PATH", "") + os.pathsep + extra)


T = TypeVar("T")
R = TypeVar("R")
PARALLEL_WORKERS = 4


def in_parallel(fn: Callable[[T], R], items: Sequence[T], workers: int = PARALLEL_WORKERS
                ) -> list[R]:
    """fn over items on a few threads (for per-host/per-switch commands, which mostly
    wait for their process); results in the items' order; the first error is raised."""
    if len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(fn, items))


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
