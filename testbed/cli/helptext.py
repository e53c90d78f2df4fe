"""Help text a person reads: one placeholder style for every ``testbed`` command.

Typer labels every parameter with its Python type (``<bool>`` after a flag,
``<list[Path]>`` after a repeatable option) and puts required arguments in braces
(``{spec}``).  The CLI's rules instead:

- a flag (``--dry-run``) has no placeholder;
- an option's placeholder is an upper-case word saying what to give (``--out DIR``,
  ``--set KEY=VALUE``); options declare it with ``metavar=``, and an option that does not
  gets a word from its kind (``PATH``, ``TEXT``, ``INTEGER``, ``NUMBER``), never a Python
  type;
- a positional argument is shown by its upper-case ``metavar`` alone (``SPEC``, ``DIR``,
  ``STUDY...``), the same in the usage line and in the arguments table.

`install` applies these rules to Typer's parameter classes; ``testbed.cli.app`` calls it once,
before any help is printed.  ``tests/unit/test_cli_help.py`` checks every command's
``--help`` against them.
"""

from __future__ import annotations

import re
from typing import Any

from typer import core

_KIND_WORDS = {"path": "PATH", "str": "TEXT", "int": "INTEGER", "float": "NUMBER",
               "file": "FILE", "directory": "DIR"}


def placeholder(label: str | None) -> str | None:
    """An upper-case word for Typer's type label (``<path>`` -> ``PATH``,
    ``<list[str]>`` -> ``TEXT``); None for none."""
    if not label:
        return None
    inner = label.strip("<>")
    m = re.fullmatch(r"list\[(.*)\]", inner)
    if m:
        inner = m.group(1)
    return _KIND_WORDS.get(inner.lower(), inner.upper())


def _option_type(self: Any, ctx: Any) -> str | None:
    if self.is_flag or self.count:
        return None
    if self.metavar is not None:
        return str(self.metavar)
    return placeholder(self.display_type(ctx))


def _argument_type(self: Any, ctx: Any) -> str | None:
    return None  # the argument's name (its metavar) says it


def _argument_usage(self: Any) -> str:
    name = self.display_name_raw
    if not self.required:
        name = f"[{name}]"
    return name + ("..." if self.nargs != 1 else "")


def install() -> None:
    """Make Typer's help follow the rules above (idempotent)."""
    core.TyperOption.display_type_rich = _option_type  # type: ignore[method-assign]
    core.TyperArgument.display_type_rich = _argument_type  # type: ignore[method-assign]
    core.TyperArgument._usage_display_name = _argument_usage  # type: ignore[method-assign]
