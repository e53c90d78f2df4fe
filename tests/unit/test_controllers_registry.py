"""The controller apps are listed once (`controllers.registry`): the spec's kinds, the
launcher (`ControllerProcess`, ``python -m controllers``) and its help come from there."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from controllers.__main__ import build_parser
from controllers.launcher import ControllerProcess
from controllers.registry import (
    APPS,
    REGISTRY,
    ControllerApp,
    ControllerRegistry,
    UnknownAppError,
    app_module,
    canonical_app,
)
from controllers.rules import POLICIES
from testbed.spec.controller_kinds import CONTROLLER_KINDS, FABRIC_KINDS, NO_CONTROLLER
from testbed.spec.model import Controller

ROOT = Path(__file__).resolve().parents[2]


def test_the_spec_allows_exactly_the_registry_kinds() -> None:
    assert REGISTRY.kinds() == FABRIC_KINDS
    assert (NO_CONTROLLER, *REGISTRY.kinds()) == CONTROLLER_KINDS
    literal = next(a for a in get_args(Controller.model_fields["kind"].annotation)
                   if a is not type(None))
    assert get_args(literal) == CONTROLLER_KINDS


def test_every_spec_kind_and_alias_names_its_app() -> None:
    assert REGISTRY.names() == tuple(APPS) == ("single_path", "ecmp", "spray")
    for app in REGISTRY:
        for name in (app.name, app.kind, *app.aliases):
            assert canonical_app(name) == app.name
            assert app_module(name) == app.module == APPS[app.name]
    with pytest.raises(UnknownAppError, match="choose one of single_path, ecmp, spray"):
        canonical_app(NO_CONTROLLER)


def test_the_launcher_takes_its_names_from_the_registry(tmp_path: Path) -> None:
    for app in REGISTRY:
        for name in (app.name, *app.aliases):
            ctl = ControllerProcess(name, "fattree,4", log=tmp_path / "c.log")
            assert ctl.app == app.name and ctl.describe()["app"] == app.name
    with pytest.raises(UnknownAppError, match=", ".join(REGISTRY.names())):
        ControllerProcess("flowlet", "fattree,4", log=tmp_path / "c.log")


def test_the_cli_help_lists_the_registry() -> None:
    res = subprocess.run([sys.executable, "-m", "controllers", "--help"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0
    assert f"one of: {', '.join(REGISTRY.names())}" in res.stdout
    for app in REGISTRY:
        assert f"  {app.name} " in res.stdout
    # another registry, another help: nothing in the parser names an app itself
    other = ControllerRegistry([ControllerApp("flowlet", "flow-let", "m", "FlowletApp",
                                              "a new port per flowlet", aliases=("flow-let",))],
                               ["flow-let"])
    text = build_parser(other).format_help()
    assert "one of: flowlet" in text and "a new port per flowlet" in text
    assert "spray" not in text and "ecmp" not in text


def test_each_app_module_holds_its_class_and_policy() -> None:
    for app in REGISTRY:
        cls = getattr(importlib.import_module(app.module), app.app_class)
        assert app.name == cls.POLICY and cls.POLICY in POLICIES
    assert set(POLICIES) == set(REGISTRY.names())


def test_a_registry_that_does_not_match_the_spec_is_refused() -> None:
    one = ControllerApp("ecmp", "ecmp", "controllers.ecmp", "EcmpApp", "per flow")
    with pytest.raises(ValueError, match="do not match the spec's kinds"):
        ControllerRegistry([one], FABRIC_KINDS)
    with pytest.raises(ValueError, match="'ecmp' is given twice"):
        ControllerRegistry([one, one], ["ecmp", "ecmp"])
    with pytest.raises(ValueError, match="must be its name or an alias"):
        ControllerRegistry([ControllerApp("a", "b", "m", "C", "d")], ["b"])


def test_the_docs_tables_name_every_app() -> None:
    apps = (ROOT / "docs" / "controllers.md").read_text()
    spec = (ROOT / "docs" / "spec.md").read_text()
    row = next(line for line in spec.splitlines() if line.startswith("| `kind` | `none`"))
    for app in REGISTRY:
        assert f"| `{app.name}` |" in apps
        assert f"`{app.kind}`" in row
