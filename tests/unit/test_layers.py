"""The import contracts (pyproject.toml, `[tool.importlinter]`) hold, and they can fail.

The second half copies the packages to a temporary directory, inverts one import there
(a low layer importing a high one, or two sibling modules importing each other) and
shows that `lint-imports` then names the broken contract and the offending import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")
PACKAGES = ("testbed", "analysis", "controllers", "topologies", "experiments")


def lint(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run([str(LINT), "--no-cache"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_contracts_hold() -> None:
    res = lint(ROOT, ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert " BROKEN" not in res.stdout and "KEPT" in res.stdout


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packages and pyproject.toml, copied without caches."""
    dest = tmp_path_factory.mktemp("layers")
    for pkg in PACKAGES:
        if (ROOT / pkg).is_dir():
            shutil.copytree(ROOT / pkg, dest / pkg,
                            ignore=shutil.ignore_patterns("__pycache__", "*.toml", "*.md",
                                                          "*.pcap*", "*.csv"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


@pytest.mark.parametrize(("module", "line", "broken", "names"), [
    # core is the bottom layer: it may not reach up into the CLI
    ("testbed/core/units.py", "import testbed.cli.app", "layers:",
     "testbed.core.units -> testbed.cli.app"),
    # the bundle contract may not depend on how a run is executed
    ("testbed/results/bundle.py", "import testbed.run.study", "layers:",
     "testbed.results.bundle -> testbed.run.study"),
    # analysis reads bundles, never the code that captured them
    ("analysis/flows.py", "import testbed.host.capture", "analysis reads",
     "analysis.flows -> testbed.host.capture"),
    # two siblings importing each other
    ("testbed/core/units.py", "import testbed.core.compat", "no import cycles",
     "compat"),
])
def test_an_inverted_import_breaks_a_contract(copy: Path, module: str, line: str, broken: str,
                                              names: str) -> None:
    target = copy / module
    original = target.read_text()
    extra = line
    if broken == "no import cycles":  # the other direction of the pair as well
        (copy / "testbed/core/compat.py").write_text(
            (copy / "testbed/core/compat.py").read_text() + "\nimport testbed.core.units\n")
    try:
        target.write_text(original + f"\n{extra}  # inverted on purpose\n")
        res = lint(copy, copy)
    finally:
        target.write_text(original)
        shutil.copy(ROOT / "testbed/core/compat.py", copy / "testbed/core/compat.py")
    assert res.returncode != 0
    out = res.stdout
    assert "BROKEN" in out
    assert broken in out.split("Broken contracts", 1)[1]
    assert names in out


def test_the_copy_itself_passes(copy: Path) -> None:
    """The failures above come from the inverted import alone."""
    res = lint(copy, copy)
    assert res.returncode == 0, res.stdout
