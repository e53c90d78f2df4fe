"""Dependency audit for the lint step: pip-audit over the project's environment.

Run as ``python scripts/audit_deps.py``.  Exit 1 only when pip-audit found a known
vulnerability; when the vulnerability service cannot be reached (offline, proxy, time
out) or pip-audit is not installed, print ``dependency audit: could not check (...)``
and exit 0, so an offline machine can still lint.  The audit is bounded by a timeout
(``TESTBED_AUDIT_TIMEOUT`` seconds, default 120) and can never hang the test script.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.core.commands import CommandRunner
from testbed.core.errors import CommandTimeout, MissingFeatureError

DEFAULT_TIMEOUT_S = 120.0


def audit_argv(python: str) -> list[str]:
    """The pip-audit command line: this interpreter's environment, JSON out, no spinner.

    python: the interpreter whose environment is audited (pip-audit installed in it).
    ``--local``: the venv's own packages, not the distribution's system site packages
    (the venv sees them for Mininet; their fixes come with the distribution's updates).
    """
    return [python, "-m", "pip_audit", "--local", "--progress-spinner", "off",
            "--skip-editable",
            "--format", "json", "--timeout", "15"]


def verdict(returncode: int, stdout: str, stderr: str) -> tuple[int, str]:
    """Turn pip-audit's outcome into (exit code, one line to print).

    returncode, stdout, stderr: what pip-audit returned.  Vulnerabilities found: exit 1
    naming them; nothing could be looked up (service unreachable, every package skipped,
    output not JSON): exit 0 with "could not check"; otherwise exit 0, "no known ...".
    """
    try:
        data = json.loads(stdout) if stdout.strip() else None
    except json.JSONDecodeError:
        data = None
    deps = data.get("dependencies") if isinstance(data, dict) else None
    if not isinstance(deps, list):
        tail = (stderr.strip().splitlines() or [f"pip-audit exit {returncode}"])[-1]
        return 0, f"dependency audit: could not check ({tail[:200]})"
    found = [f"{d.get('name')} {d.get('version')} "
             f"({', '.join(str(v.get('id', '?')) for v in d['vulns'])})"
             for d in deps if isinstance(d, dict) and d.get("vulns")]
    if found:
        return 1, "dependency audit: known vulnerabilities: " + "; ".join(found)
    checked = [d for d in deps if isinstance(d, dict) and "skip_reason" not in d]
    if deps and not checked:
        return 0, (f"dependency audit: could not check (all {len(deps)} packages skipped; "
                   "is the vulnerability service reachable?)")
    skipped = len(deps) - len(checked)
    extra = f", {skipped} skipped" if skipped else ""
    return 0, f"dependency audit: no known vulnerabilities ({len(checked)} packages checked{extra})"


def main() -> int:
    """Run the audit once, print one line, return the exit code."""
    timeout = float(os.environ.get("TESTBED_AUDIT_TIMEOUT", DEFAULT_TIMEOUT_S))
    runner = CommandRunner()
    try:
        res = runner.run(audit_argv(sys.executable), timeout=timeout, check=False)
    except CommandTimeout:
        print(f"dependency audit: could not check (pip-audit ran past {timeout:g}s)")
        return 0
    except MissingFeatureError:
        print("dependency audit: could not check (pip-audit is not installed)")
        return 0
    if "No module named pip_audit" in res.stderr:
        print("dependency audit: could not check (pip-audit is not installed; "
              "pip install pip-audit)")
        return 0
    code, line = verdict(res.returncode, res.stdout, res.stderr)
    print(line)
    return code


if __name__ == "__main__":
    sys.exit(main())
