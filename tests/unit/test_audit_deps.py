"""The lint step's dependency audit: vulnerabilities fail it, an offline service does not."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from testbed.core.compat import tomllib

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("audit_deps", ROOT / "scripts/audit_deps.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_vulnerability_fails_the_lint():
    out = json.dumps({"dependencies": [
        {"name": "pyarrow", "version": "14.0.0",
         "vulns": [{"id": "PYSEC-2023-238", "fix_versions": ["14.0.1"]}]},
        {"name": "numpy", "version": "1.26.0", "vulns": []}]})
    code, line = _module().verdict(1, out, "")
    assert code == 1
    assert "pyarrow 14.0.0" in line and "PYSEC-2023-238" in line


def test_unreachable_service_is_reported_not_failed():
    mod = _module()
    code, line = mod.verdict(1, "", "requests.exceptions.ConnectionError: no route to host")
    assert code == 0 and "could not check" in line and "ConnectionError" in line
    skipped = json.dumps({"dependencies": [
        {"name": "a", "skip_reason": "Dependency not found on PyPI"}]})
    code, line = mod.verdict(0, skipped, "")
    assert code == 0 and "could not check" in line


def test_clean_environment_passes():
    out = json.dumps({"dependencies": [{"name": "numpy", "version": "2.0", "vulns": []}]})
    assert _module().verdict(0, out, "") == (
        0, "dependency audit: no known vulnerabilities (1 packages checked)")


def test_pyarrow_requirement_excludes_cve_2023_47248():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "pyarrow>=14.0.1" in deps
    assert "timeout" in (ROOT / "scripts/test").read_text().split("audit_deps.py")[0][-200:]
