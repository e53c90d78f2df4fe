"""What every command of the CLI shares."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer

from testbed.core.errors import TestbedError, error_lines

T = TypeVar("T")


def guarded(fn: Callable[[], T]) -> T:
    """Call fn; a deliberate testbed error becomes one line on stderr and its exit code."""
    try:
        return fn()
    except TestbedError as exc:
        for line in error_lines(exc):
            typer.echo(line, err=True)
        raise typer.Exit(exc.exit_code) from None


def hand_over_on_exit(ctx: typer.Context, *paths: Path) -> None:
    """When the command of ctx ends (normally, with an error or on Ctrl-C), give what it
    wrote into paths to the user who ran sudo, readable (`testbed.core.ownership`; nothing
    happens without sudo)."""
    import time

    from testbed.core.ownership import hand_over

    start = time.time() - 1.0  # only what this command made or changed (ctime; clock slack)

    def give() -> None:
        for p in paths:
            hand_over(p, since=start)

    ctx.call_on_close(give)
