"""Every command's --help follows the CLI's help rules (see testbed.cli.helptext)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from testbed.cli.app import app

REPO = Path(__file__).resolve().parents[2]
COMMAND = typer.main.get_command(app)
NAMES = sorted(COMMAND.commands)  # type: ignore[attr-defined]
PYTHON_TYPES = re.compile(r"<(bool|str|int|float|path|text|file|directory)>|list\[|"
                          r"\bPath\b|\bNoneType\b", re.IGNORECASE)


def _help(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_every_command_is_checked():
    assert {"run", "query", "study", "vm", "report", "analyze", "doctor"} <= set(NAMES)


@pytest.mark.parametrize("name", ["", *NAMES])
def test_help_has_no_python_types(name):
    text = _help(*([name] if name else []))
    assert not PYTHON_TYPES.search(text), PYTHON_TYPES.search(text)


@pytest.mark.parametrize("name", NAMES)
def test_usage_line_uses_one_placeholder_style(name):
    text = _help(name)
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    pieces = usage.split(f" {name} ", 1)[1].split()
    assert pieces[0] == "[OPTIONS]", usage
    for piece in pieces[1:]:
        assert re.fullmatch(r"\[?[A-Z][A-Z_]*\]?(\.\.\.)?|--", piece), (piece, usage)


@pytest.mark.parametrize("name", NAMES)
def test_flags_have_no_placeholder_and_arguments_an_upper_case_name(name):
    cmd = COMMAND.commands[name]  # type: ignore[attr-defined]
    ctx = typer.Context(cmd)
    for param in cmd.get_params(ctx):
        if param.param_type_name == "argument":
            assert param.metavar and param.metavar == param.metavar.upper(), param.name
            assert param.display_type_rich(ctx) is None
        elif getattr(param, "is_flag", False):
            assert param.display_type_rich(ctx) is None, param.name
        else:
            shown = param.display_type_rich(ctx)
            assert shown and not shown.startswith("<"), (param.name, shown)


def test_vm_usage_shows_the_command():
    assert re.search(r"Usage: .* vm \[OPTIONS\] -- CMD\.\.\.", _help("vm"))


def test_study_has_dry_run_and_set():
    text = _help("study")
    assert "--dry-run" in text and "--set" in text and "KEY=VALUE" in text


def _study(tmp_path: Path) -> Path:
    study = tmp_path / "mystudy"
    (study / "quick").mkdir(parents=True)
    shutil.copy(REPO / "experiments" / "examples" / "minimal.toml", study / "quick" / "a.toml")
    return study


def test_study_dry_run_applies_set(tmp_path):
    study = _study(tmp_path)
    result = CliRunner().invoke(app, ["study", str(study), "--dry-run", "--out",
                                      str(tmp_path / "out"), "--set", "transport.cc=reno"])
    assert result.exit_code == 0, result.output
    assert "mystudy (quick): a" in result.output
    assert "tcp_congestion_control=reno" in result.output
    assert not (tmp_path / "out").exists()


def test_study_set_error_names_set(tmp_path):
    study = _study(tmp_path)
    result = CliRunner().invoke(app, ["study", str(study), "--dry-run", "--set",
                                      "duraton=10s"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: --set duraton: unknown key; did you mean 'duration'?"
