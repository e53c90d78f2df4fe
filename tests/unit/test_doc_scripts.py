"""Every ``python SCRIPT.py ARGS`` the documentation shows runs (`docexamples.scripts_in`).

A benchmark (``benchmarks/*.py``) takes minutes to hours and most need the kernel's
features, so it runs with its documented arguments and ``--help``: the script exists,
its arguments parse, and its help names every ``--option`` the documentation gives it
(``--help`` alone would hide an unknown option: argparse acts on it first).  Any other
script runs as documented and must exit 0.  Commands inside ``testbed vm -- ...`` are
checked the same way by tests/integration/test_documented_commands.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from docexamples import DocCommand, documented_scripts, scripts_in, unknown_options

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = documented_scripts(ROOT)


def _run(cmd: DocCommand) -> subprocess.CompletedProcess[str]:
    """Run cmd as the module docstring says; a benchmark's option its help does not name
    is exit code 2, as argparse would say."""
    script = cmd.argv[1]
    bench = script.startswith("benchmarks/")
    res = subprocess.run([sys.executable, script, *cmd.argv[2:], *(["--help"] * bench)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    unknown = unknown_options(cmd.argv[2:], res.stdout) if bench else []
    if res.returncode == 0 and unknown:
        res.returncode, res.stderr = 2, f"{script}: its --help names no {unknown[0]}"
    return res


def test_the_documentation_shows_scripts() -> None:
    shown = {c.argv[1] for c in SCRIPTS}
    assert {"benchmarks/ray_sweep.py", "benchmarks/analysis_speed.py"} <= shown, shown


@pytest.mark.parametrize("cmd", SCRIPTS, ids=[c.where for c in SCRIPTS])
def test_a_documented_script_runs(cmd: DocCommand) -> None:
    assert (ROOT / cmd.argv[1]).is_file(), f"{cmd.where}: {cmd.argv[1]} does not exist"
    res = _run(cmd)
    assert res.returncode == 0, (f"{cmd.where}: `{cmd.text}`: exit {res.returncode}: "
                                 f"{res.stderr.strip()[-400:]}")


def test_a_wrong_argument_fails() -> None:
    """The check is not a formality: an option the script lacks fails it."""
    text = "Run it:\n\n    .venv/bin/python benchmarks/ray_sweep.py --no-such-option\n"
    [cmd] = scripts_in(text, "example.md")
    assert cmd.argv == ("python", "benchmarks/ray_sweep.py", "--no-such-option")
    assert _run(cmd).returncode == 2


def test_inline_and_continued_lines_are_found() -> None:
    text = ("Print them with `.venv/bin/python tests/unit/test_experiments_specs.py`.\n\n"
            "    $ sudo .venv/bin/python benchmarks/analysis_speed.py \\\n"
            "        --packets 1000\n\n"
            "Not a script: `python -m controllers APP`.\n")
    found = [c.argv for c in scripts_in(text, "example.md")]
    assert found == [("python", "tests/unit/test_experiments_specs.py"),
                     ("python", "benchmarks/analysis_speed.py", "--packets", "1000")]
