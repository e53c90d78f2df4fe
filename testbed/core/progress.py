"""Progress of a sweep on the terminal: a rich progress bar, or plain lines when piped.

The bar shows runs done / total, the current run and its phase, elapsed time and ETA.
Finished runs are printed above the bar, one line each, so the scrollback keeps a record.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

_STYLE = {"complete": "green", "failed": "red", "interrupted": "yellow"}


class SweepProgress:
    """A `testbed.run.sweep.Progress` drawing a rich bar (or plain lines off a terminal).

    stream: where to write (stderr by default); plain: force plain lines.
    """

    def __init__(self, stream: TextIO | None = None, plain: bool | None = None):
        self.console = Console(file=stream or sys.stderr, highlight=False)
        self.plain = (not self.console.is_terminal) if plain is None else plain
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._total = 0
        self._done = 0
        self._run = ""

    def start(self, total: int, skipped: int) -> None:
        """A sweep of total runs begins; skipped of them are already complete."""
        self._total, self._done = total, skipped
        if skipped:
            self.console.print(f"{skipped} of {total} runs already complete; skipping them")
        if self.plain:
            return
        self._bar = Progress(
            TextColumn("[bold]{task.fields[run]}"), TextColumn("{task.fields[phase]}"),
            BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"),
            TimeRemainingColumn(), console=self.console, transient=False)
        self._bar.start()
        self._task = self._bar.add_task("sweep", total=total, completed=skipped, run="",
                                        phase="")

    def begin(self, index: int, run_id: str) -> None:
        """Run number index (0-based) starts."""
        self._run = run_id
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, run=escape(run_id), phase="starting")
        else:
            self.console.print(f"\\[{self._done + 1}/{self._total}] {escape(run_id)}: started "
                               f"{time.strftime('%H:%M:%S')}")

    def phase(self, text: str) -> None:
        """The current run entered a phase (set-up, traffic, analysis, ...)."""
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, phase=escape(text))
        else:
            self.console.print(f"\\[{self._done + 1}/{self._total}] {escape(self._run)}: "
                               f"{escape(text)} {time.strftime('%H:%M:%S')}")

    def end(self, run_id: str, status: str, wall_s: float, error: str | None) -> None:
        """The current run ended with status after wall_s seconds."""
        self._done += 1
        style = _STYLE.get(status, "")
        line = (f"\\[{self._done}/{self._total}] {escape(run_id)}: "
                f"[{style}]{status}[/] in {wall_s:.1f}s")
        if error:
            line += f" -- {escape(error)}"
        if self._bar is not None and self._task is not None:
            self._bar.console.print(line)
            self._bar.update(self._task, advance=1, phase="")
        else:
            self.console.print(line)

    def note(self, text: str) -> None:
        """A line under the current run (its fidelity verdict)."""
        if self._bar is not None:
            self._bar.console.print(escape(text))
        else:
            self.console.print(escape(text))

    def close(self) -> None:
        """Stop drawing."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
