"""The transcript: every command a `testbed.core.commands.CommandRunner` handled, in order.

It goes into each result bundle twice: ``transcript.jsonl`` (one `TranscriptEntry` a
line: what ran, where, when and how it ended) and ``commands.sh`` (`Transcript.as_shell`,
a script to replay the run by hand).  Also here: how a command is put into a Mininet
host's namespaces (`in_namespace`), which is what the transcript's ``where`` records.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

STDERR_TAIL = 2000  # characters of a command's stderr kept in its entry and its error


class Namespaced(Protocol):
    """Anything with a name and the pid of a process inside its namespaces (a Mininet Node)."""

    name: str
    pid: int


@dataclass
class TranscriptEntry:
    """One line of the transcript: what ran, where, when and how it ended."""

    t_wall: float
    argv: list[str]
    where: str
    returncode: int | None
    duration: float
    kind: str = "run"  # run | spawn | stop | batch (a `BatchShell` started)
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
                elif e.at is None and at is not None:
                    lines.append("# (not on the schedule:)")
                at = e.at
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
    command = shlex.join(entry.argv)
    if comment:  # an argument's newline (inside its quotes) must not end the comment
        command = command.replace("\n", "\n" + comment)
    if entry.input is None:
        return [prefix + command + suffix]
    body = entry.input.split("\n")
    if body and body[-1] == "":
        body.pop()
    tag = "EOF"
    while tag in body:
        tag += "_"
    return [f"{prefix}{command} <<'{tag}'{suffix}",
            *(comment + line for line in body), comment + tag]


def in_namespace(argv: Sequence[str], host: Namespaced | None) -> list[str]:
    """Prefix argv so that it runs in host's network and mount namespaces.

    argv: the command; host: a Mininet node (or None for the root namespace).
    """
    if host is None:
        return list(argv)
    return ["mnexec", "-a", str(host.pid), *argv]

