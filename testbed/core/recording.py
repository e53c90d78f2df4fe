"""A `CommandRunner` that records every command and executes none: the dry run.

``testbed run --dry-run`` carries a run out through the same code as a real run
(`testbed.run.execute.execute_run`) with a `RecordingRunner`: every ``run``, ``spawn`` and
batch-shell command lands in the transcript exactly as a real run records it, and
nothing is executed.  What the run reads back from a command (a sysctl, the OVS version,
the bridges) comes from an `Answer`, a function of the command and where it runs, so
that the code after it takes the path a real run takes.  Background processes are
`RecordedProcess`es: running until stopped, finished as soon as they are waited for.
Code that waits for a process to say something (a capture listening, a flow tool ready)
asks `recording(runner)` first and does not wait in a dry run.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from testbed.core.batch import BatchShell
from testbed.core.commands import CommandRunner, Result
from testbed.core.process import ProcessOwner
from testbed.core.transcript import Namespaced, TranscriptEntry, in_namespace

# stdout of a command, given (argv without the namespace prefix, where it runs, stdin)
Answer = Callable[[list[str], str, "str | None"], str]
RECORDED_PID = -1  # no process has it: signals and priorities sent to it fail harmlessly


def no_answer(argv: list[str], where: str, input: str | None) -> str:
    """Every command prints nothing."""
    return ""


def recording(runner: object) -> bool:
    """Whether runner only records (a dry run): nothing runs, nothing is waited for."""
    return bool(getattr(runner, "recording", False))


class RecordedPopen:
    """What callers read of a `subprocess.Popen`: its exit status (0 once finished)."""

    def __init__(self, process: RecordedProcess):
        self._process = process
        self.pid = RECORDED_PID
        self.stdin = self.stdout = self.stderr = None

    @property
    def returncode(self) -> int | None:
        return None if self._process.running() else 0

    def poll(self) -> int | None:
        return self.returncode


class RecordedProcess:
    """A background process of a dry run: it runs until `stop`, and has finished (exit
    status 0) as soon as something waits for it.  Same interface as
    `testbed.core.process.Process`."""

    def __init__(self, argv: list[str], where: str, runner: ProcessOwner):
        self.argv = argv
        self.where = where
        self._runner = runner
        self._done = False
        self._stopped = False
        self.popen = RecordedPopen(self)

    @property
    def pid(self) -> int:
        return RECORDED_PID

    def running(self) -> bool:
        return not self._done

    def wait(self, timeout: float | None = None) -> int:
        self._done = True
        return 0

    def send(self, sig: int) -> bool:
        return not self._done

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 5.0) -> int | None:
        if self._stopped:
            return 0
        self._stopped = self._done = True
        self._runner.forget(self)  # type: ignore[arg-type]
        self._runner.transcript.add(TranscriptEntry(time.time(), self.argv, self.where, 0,
                                                    0.0, kind="stop"))
        return 0


class RecordedBatchShell(BatchShell):
    """A `BatchShell` that records its start, each command it is given and its stop."""

    def __init__(self, runner: RecordingRunner, tool: str, host: Namespaced | None = None):
        super().__init__(runner, tool, host)
        self._runner: RecordingRunner = runner

    def _start(self, argv: list[str]) -> RecordedProcess:  # type: ignore[override]
        return RecordedProcess(argv, self._where, self._runner)

    def realtime(self) -> bool:
        return False

    def _send(self, lines: list[str]) -> tuple[int, int, float]:
        first = self._line + 1
        self._line += len(lines) + 1
        return first, self._line, time.time()

    def _collect(self, cmds: Sequence[Sequence[str]], first: int, sentinel: int, t0: float,
                 deadline: float, at: float | None = None) -> float:
        for argv in cmds:
            self._runner.transcript.add(TranscriptEntry(
                t0, in_namespace(argv, self.host), self._where, 0, 0.0, at=at))
            self._runner.answer(list(argv), self._where, None)  # what it changes
        return time.time()

    def stop(self) -> None:
        self.process.stop()


class RecordingRunner(CommandRunner):
    """Records commands instead of running them (see the module docstring).

    answer: what each command prints (default: nothing).
    """

    recording = True

    def __init__(self, answer: Answer = no_answer):
        super().__init__()
        self.answer = answer

    def run(self, argv: Sequence[str], *, host: Namespaced | None = None,
            timeout: float | None = None, check: bool = True, input: str | None = None,
            env: dict[str, str] | None = None, record: bool = True,
            at: float | None = None) -> Result:
        full = in_namespace(argv, host)
        where = host.name if host is not None else "root"
        if record:
            self.transcript.add(TranscriptEntry(time.time(), full, where, 0, 0.0,
                                                input=input, at=at))
        return Result(full, 0, self.answer(list(argv), where, input), "", 0.0)

    def call(self, argv: Sequence[str], *, host: Namespaced | None = None,
             env: dict[str, str] | None = None, timeout: float | None = None,
             relay: bool = False) -> int:
        full = in_namespace(argv, host)
        where = host.name if host is not None else "root"
        self.transcript.add(TranscriptEntry(time.time(), full, where, 0, 0.0))
        return 0

    def spawn(self, argv: Sequence[str], *, host: Namespaced | None = None,
              log: Path | None = None, stdout: Path | None = None,
              env: dict[str, str] | None = None) -> RecordedProcess:  # type: ignore[override]
        full = in_namespace(argv, host)
        where = host.name if host is not None else "root"
        proc = RecordedProcess(full, where, self)
        self.track(proc)  # type: ignore[arg-type]
        self.transcript.add(TranscriptEntry(time.time(), full, where, None, 0.0,
                                            kind="spawn"))
        return proc

    def batch_shell(self, tool: str, host: Namespaced | None = None) -> BatchShell:
        return RecordedBatchShell(self, tool, host)
