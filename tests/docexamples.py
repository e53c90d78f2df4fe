"""Every `testbed` command and SQL query the documentation shows, found and classified.

The documentation is README.md, docs/*.md, experiments/README.md and
experiments/*/README.md.  A command is found in a code block (fenced with no language or
sh/bash/console/shell, or indented by four spaces) or in an inline code span, on a line
that starts with ``testbed `` (after an optional ``$ ``, ``sudo `` or ``.venv/bin/``); a
line ending in a backslash, or with a quote still open, continues on the next line.  A
``for VAR in GLOB; do testbed ...; done`` loop is one command per file the glob matches.

Each command is one of:

* a **synopsis** (``testbed doctor [--json]``, ``testbed run SPEC.toml --out DIR``): it
  holds a bracket, an ellipsis or an upper-case placeholder other than ``DIR``/``RUN``.
  Its subcommand and every ``--option`` it names must exist (checked against ``--help``).
* a **mention**: a subcommand with options only (``testbed run --dry-run`` in prose),
  checked as a synopsis.
* a **command**: everything else.  ``DIR`` and ``RUN`` stand for a results folder and
  one run's bundle; `tests/integration/test_documented_commands.py` substitutes real
  ones and runs it (see its docstring for what each subcommand is run against).

`scripts_in` finds the ``python SCRIPT.py ARGS`` lines the documentation shows
(tests/unit/test_doc_scripts.py runs them).

`stray_queries` lists SQL the documentation shows outside a ``testbed query`` command,
which no test would run: the documentation may not hold any.
"""

from __future__ import annotations

import glob
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

SHELL_LANGS = {"", "sh", "bash", "console", "shell"}
PLACEHOLDERS = {"DIR", "RUN"}  # real folders substituted, for these subcommands only:
SUBSTITUTED = {"query", "report"}
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(\.[A-Za-z]+)?(\.\.\.)?$")
_INLINE = re.compile(r"`(testbed [^`]+)`")
_FOR = re.compile(r"^for (\w+) in (\S+); do (.+?);? done$")
_PREFIXES = ("$ ", "sudo ", ".venv/bin/")


def doc_files(root: Path) -> list[Path]:
    """The documentation files whose commands are tested, in a fixed order."""
    files = [root / "README.md", *sorted((root / "docs").glob("*.md")),
             root / "experiments" / "README.md",
             *sorted((root / "experiments").glob("*/README.md"))]
    return [f for f in files if f.is_file()]


@dataclass(frozen=True)
class DocCommand:
    """One documented command: where it is written and its words."""

    file: str
    line: int
    end: int
    text: str
    argv: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def sub(self) -> str:
        """The subcommand (``run``, ``query``, ...)."""
        return self.argv[1] if len(self.argv) > 1 else ""

    @property
    def synopsis(self) -> bool:
        """A usage line with placeholders, not a command to run."""
        for word in self.argv[1:]:
            if (word.startswith("--") or (word in PLACEHOLDERS and self.sub in SUBSTITUTED)
                    or any(c.isspace() for c in word)):  # a quoted value (SQL) is real
                continue
            if ("[" in word or "..." in word or "{" in word or "<" in word
                    or _PLACEHOLDER.match(word)):
                return True
        return False

    @property
    def runnable(self) -> bool:
        """A command to run: no placeholder, and more than a mention of a subcommand and
        its options (``testbed run --dry-run`` in prose names an option, runs nothing)."""
        if self.synopsis:
            return False
        if self.sub == "vm":
            return "--" in self.argv
        return any(not w.startswith("-") for w in self.argv[2:])

    def options(self) -> list[str]:
        """The ``--option`` names it uses (values after ``=`` left out), up to ``--``."""
        out = []
        for word in self.argv[2:]:
            if word == "--":
                break
            if word.startswith("--"):
                out.append(word.split("=", 1)[0].strip("[]"))
        return out


def _strip(line: str) -> str:
    line = line.strip()
    changed = True
    while changed:
        changed = False
        for p in _PREFIXES:
            if line.startswith(p):
                line, changed = line[len(p):].lstrip(), True
    return line


def _complete(text: str) -> bool:
    """The shell words of text are closed (no quote left open, no trailing backslash)."""
    if text.rstrip().endswith("\\"):
        return False
    try:
        shlex.split(text, comments=True)
    except ValueError:
        return False
    return True


def _code_lines(text: str) -> list[tuple[int, str, bool]]:
    """(line number, line, in a code block) for every line of a markdown text."""
    out = []
    fence: str | None = None
    lang = ""
    prev_blank = True
    indented = False
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if fence is None and stripped.startswith("```"):
            fence, lang = "```", stripped[3:].strip().lower()
            out.append((n, line, False))
            continue
        if fence is not None:
            if stripped.startswith("```"):
                fence = None
                out.append((n, line, False))
            else:
                out.append((n, line, lang in SHELL_LANGS))
            continue
        if line.startswith("    ") and (prev_blank or indented) and stripped:
            indented = True
            out.append((n, line, True))
        else:
            indented = indented and stripped != "" and line.startswith("    ")
            out.append((n, line, False))
        prev_blank = stripped == ""
    return out


def _shown(text: str, inline: re.Pattern[str], starts: Callable[[str], bool]
           ) -> Iterator[tuple[int, int, str, bool]]:
    """(first line, last line, words, in a code block) of every command one markdown
    text shows: inline code spans matching inline (group 1), and code-block lines for
    which starts(line without its prefixes) holds, continued while a quote is open or a
    backslash ends the line."""
    lines = _code_lines(text)
    i = 0
    while i < len(lines):
        n, line, code = lines[i]
        i += 1
        if not code:
            for m in inline.finditer(line):
                yield n, n, m.group(1), False
            continue
        buf = _strip(line)
        if not starts(buf):
            continue
        while not _complete(buf) and i < len(lines) and lines[i][2]:
            buf = buf.rstrip().removesuffix("\\") + "\n" + lines[i][1].strip()
            i += 1
        yield n, lines[i - 1][0], buf, True


def commands_in(text: str, name: str, root: Path | None = None) -> list[DocCommand]:
    """Every testbed command in one markdown text (name: its path, for messages; root:
    where a ``for`` loop's glob is expanded)."""
    found: list[DocCommand] = []
    for n, last, buf, block in _shown(
            text, _INLINE, lambda w: w.startswith(("testbed ", "for ")) and "testbed " in w):
        found.extend(_loop(buf, name, n, last, root) if block and buf.startswith("for ")
                     else _parsed(buf, name, n, last))
    return found


def _parsed(text: str, name: str, line: int, end: int) -> list[DocCommand]:
    try:
        argv = tuple(shlex.split(text, comments=True))
    except ValueError:
        argv = tuple(text.split())
    return [DocCommand(name, line, end, " ".join(text.split()), argv)] if argv else []


def _loop(text: str, name: str, line: int, end: int, root: Path | None
          ) -> list[DocCommand]:
    m = _FOR.match(" ".join(text.split()))
    if not m or root is None:
        return _parsed(text, name, line, end)
    var, pattern, body = m.groups()
    out = []
    for path in sorted(glob.glob(pattern, root_dir=root)):
        out.extend(_parsed(body.replace(f'"${var}"', path).replace(f"${var}", path),
                           name, line, end))
    if not out:
        raise ValueError(f"{name}:{line}: the loop's glob {pattern} matches no file")
    return out


def documented_commands(root: Path) -> list[DocCommand]:
    """Every testbed command of every documentation file, in order."""
    out = []
    for f in doc_files(root):
        out.extend(commands_in(f.read_text(encoding="utf-8"), str(f.relative_to(root)),
                               root))
    return out


_SCRIPT = re.compile(r"^python3? (?!-)\S+\.py(\s|$)")
_SCRIPT_INLINE = re.compile(r"`((?:\.venv/bin/)?python3? [^`-][^`]*)`")


def scripts_in(text: str, name: str) -> list[DocCommand]:
    """Every ``python SCRIPT.py ARGS`` one markdown text shows, in a code block or an
    inline code span (after an optional ``$ ``, ``sudo `` or ``.venv/bin/``; a trailing
    backslash continues the line): ``argv`` is ``python``, the script's path and its
    arguments.  One inside ``testbed vm -- ...`` is a testbed command (`commands_in`)."""
    found: list[DocCommand] = []
    for n, last, words, _block in _shown(text, _SCRIPT_INLINE,
                                         lambda w: bool(_SCRIPT.match(w))):
        words = _strip(words)
        if _SCRIPT.match(words):
            found.extend(_parsed(words, name, n, last))
    return found


def unknown_options(args: tuple[str, ...] | list[str], help_text: str) -> list[str]:
    """The ``--options`` of args (values after ``=`` left out) that a script's ``--help``
    output does not name: running ``SCRIPT ARGS --help`` alone would not show them, since
    argparse prints the help and exits before it complains of an unknown option."""
    named = {w.strip("[],").split("=", 1)[0] for w in help_text.split()}
    return [o for o in (w.split("=", 1)[0] for w in args if w.startswith("--"))
            if o not in named]


def documented_scripts(root: Path) -> list[DocCommand]:
    """Every ``python SCRIPT.py ...`` of every documentation file, in order."""
    return [c for f in doc_files(root)
            for c in scripts_in(f.read_text(encoding="utf-8"), str(f.relative_to(root)))]


def stray_queries(text: str, name: str) -> list[str]:
    """Lines with SQL (``SELECT ... FROM``) that are not part of a testbed query command."""
    in_commands: set[int] = set()
    for cmd in commands_in(text, name):
        if cmd.sub == "query":
            in_commands.update(range(cmd.line, cmd.end + 1))
    stray = []
    for n, line, _code in _code_lines(text):
        if re.search(r"\bSELECT\b", line) and n not in in_commands:
            stray.append(f"{name}:{n}: {line.strip()}")
    return stray


@dataclass(frozen=True)
class PythonBlock:
    """A fenced ```python block: where it starts, its code, and whether the documentation
    tests run it (a block fenced ```python notest needs root: it is only compiled)."""

    where: str
    code: str
    run: bool


def python_blocks(text: str, name: str) -> list[PythonBlock]:
    """Every fenced python block of a markdown text (name: its path, for messages)."""
    out = []
    for m in re.finditer(r"^```python([^\n]*)\n(.*?)^```", text, re.S | re.M):
        line = text.count("\n", 0, m.start()) + 1
        out.append(PythonBlock(f"{name}:{line}", m.group(2),
                               "notest" not in m.group(1).split()))
    return out
