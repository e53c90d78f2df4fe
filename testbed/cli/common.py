"""What every command of the CLI shares."""

from __future__ import annotations

from collections.abc import Callable
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
