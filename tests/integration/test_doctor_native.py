"""`testbed doctor` where experiments run: every check passes and native runs are possible.

In CI this runs inside `testbed vm`, which is how the issue's "`testbed vm -- testbed
doctor --json` reports native_ok: true" is checked on every run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.needs_kernel("netem", "ovs", "mptcp")]


def test_doctor_json_reports_native_ok() -> None:
    exe = Path(sys.prefix) / "bin" / "testbed"
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "testbed.cli"]
    res = subprocess.run([*argv, "doctor", "--json"], capture_output=True, text=True,
                         timeout=300)
    report = json.loads(res.stdout)
    failed = [f"{c['name']}: {c['detail']}" for c in report["checks"] if not c["ok"]]
    assert report["native_ok"] is True, failed  # KVM / `testbed vm` may fail inside the VM
    assert res.returncode == 0, res.stderr
    names = {c["name"].lower() for c in report["checks"]}
    for needed in ("sch_netem", "openvswitch module", "ovs daemons", "mptcp"):
        assert needed in names, f"doctor does not check {needed}: {names}"
