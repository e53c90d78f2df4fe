"""The testbed's one exception tree.

::

    TestbedError                      base of everything the testbed raises on purpose
    ├── InputError                    the user's input is wrong; CLI: one line, exit 2
    │   ├── SpecError                 a spec file / override / sweep is malformed
    │   ├── UnitError                 a "10Mbit" / "25us" / "1%" / "64KiB" string is malformed
    │   ├── CaptureFormatError        a pcap/pcapng is truncated or corrupt
    │   └── UnsupportedError          asked for something this kernel/host cannot do
    │                                 (unknown congestion control, missing scheduler, ...)
    ├── MissingFeatureError           the machine lacks a tool or kernel feature; CLI: exit 2
    ├── CommandError                  a subprocess failed (carries argv, exit code, stderr tail)
    │   └── CommandTimeout            ... or ran past its timeout
    └── RunError                      a run failed at runtime (controller died, network down, ...)
        └── NodeError                 ... because of the machine, not the spec (its interfaces
                                      or bridges taken, the node unfit): another node may succeed

`InputError` and `MissingFeatureError` are "the user can fix this" errors: the CLI
prints ``error: <message>`` and exits with code 2, never a traceback. A message may hold
several problems, one per line (a spec with three mistakes); each line is printed as
``error: <line>`` (`error_lines`).
"""

from __future__ import annotations

from collections.abc import Sequence


class TestbedError(Exception):
    """Base of every error the testbed raises deliberately."""

    exit_code = 1


class InputError(TestbedError):
    """Bad user input: the message names what is wrong and how to fix it."""

    exit_code = 2


class SpecError(InputError):
    """A malformed experiment spec, override or sweep."""


class UnitError(InputError):
    """A malformed quantity string such as ``"10Mbps"``."""


class CaptureFormatError(InputError):
    """A truncated or corrupt capture file."""


class UnsupportedError(InputError):
    """A request this host cannot satisfy (e.g. an unavailable congestion control)."""


class MissingFeatureError(TestbedError):
    """A missing tool or kernel feature; the message names the remedy."""

    exit_code = 2


class RunError(TestbedError):
    """A run failed while it was executing."""


class NodeError(RunError):
    """A run failed because of the machine it ran on, not its spec (a cluster sweep retries
    it on another node)."""


class CommandError(TestbedError):
    """A subprocess exited non-zero.

    argv: the command as run; returncode: its exit status; stderr: the tail of its stderr.
    """

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str = "", where: str = ""):
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr
        self.where = where
        tail = stderr.strip().splitlines()[-3:] if stderr else []
        loc = f" in {where}" if where else ""
        msg = f"command failed{loc} (exit {returncode}): {' '.join(self.argv)}"
        if tail:
            msg += " -- " + " | ".join(tail)
        super().__init__(msg)


class CommandTimeout(CommandError):
    """A subprocess ran past its timeout and was killed."""

    def __init__(self, argv: Sequence[str], timeout: float, stderr: str = "", where: str = ""):
        super().__init__(argv, -9, stderr, where)
        self.timeout = timeout
        self.args = (f"command timed out after {timeout:g}s: {' '.join(self.argv)}",)


def error_lines(exc: BaseException) -> list[str]:
    """``error: <line>`` for each line of exc's message (one problem per line)."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return [f"error: {line}" for line in lines or [type(exc).__name__]]


def one_line(exc: BaseException, limit: int = 300) -> str:
    """exc's message on one line, for a table cell or a row of a gradebook: its lines
    joined with "; " (a library's message may go on after a line ending in ":", as
    tarfile's "file could not be opened successfully:" does), at most limit characters."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = " ".join(f"{a};" if not a.endswith((":", ";", ",")) else a for a in lines[:-1])
    text = f"{text} {lines[-1]}".strip() if lines else type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."

