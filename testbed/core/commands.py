"""`CommandRunner`: the one gate every subprocess of the testbed goes through.

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

Its parts: `testbed.core.transcript` (the record of every command, as ``transcript.jsonl``
and as a replayable ``commands.sh``; `in_namespace`), `testbed.core.process` (a
background `Process`) and `testbed.core.batch` (long-lived ``tc``/``ip`` batch shells,
`CommandRunner.batch_shell`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from testbed.core.batch import BatchShell
from testbed.core.errors import CommandError, CommandTimeout, MissingFeatureError
from testbed.core.process import Process
from testbed.core.transcript import (
    STDERR_TAIL,
    Namespaced,
    Transcript,
    TranscriptEntry,
    in_namespace,
)

DEFAULT_TIMEOUT = 60.0


@dataclass
class Result:
    """The outcome of a finished command."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    duration: float



class CommandRunner:
    """Runs commands as argument lists, with timeouts, raising `CommandError` on failure.

    A `testbed.core.recording.RecordingRunner` records the same commands without running
    them (``testbed run --dry-run``).
    """

    recording = False  # a RecordingRunner's is True

    def __init__(self, default_timeout: float = DEFAULT_TIMEOUT):
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
             relay: bool = False, pass_fds: Sequence[int] = ()) -> int:
        """Run argv with its output streamed to ours (not captured); return its exit code.

        For long interactive steps (a VM, a nested CLI). host/env/timeout as in `run`;
        timeout None waits forever; relay: copy the child's stdout+stderr through a pipe
        (for children such as qemu that reopen their stdout and would overwrite a file);
        a relayed child gets no stdin and its own process group, which an interrupt
        (KeyboardInterrupt, or SIGTERM turned into one) stops as a whole; pass_fds: our
        open file descriptors the child keeps (a lock it must hold while it lives).
        """
        full = in_namespace(argv, host)
        where = host.name if host is not None else "root"
        t0 = time.time()
        try:
            # relay: a process tree (vng -> virtme-run -> qemu) in a group of its own, so
            # an interrupt stops all of it, not just its first process
            proc = subprocess.Popen(full, env=env,
                                    stdin=subprocess.DEVNULL if relay else None,
                                    stdout=subprocess.PIPE if relay else None,
                                    stderr=subprocess.STDOUT if relay else None,
                                    process_group=0 if relay else None,
                                    pass_fds=tuple(pass_fds))
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

    def track(self, proc: Process) -> None:
        """Count proc among this runner's background processes (a `BatchShell`'s)."""
        with self._lock:
            self._procs.append(proc)

    def forget(self, proc: Process) -> None:
        """Stop counting proc (`Process.stop` calls this)."""
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

