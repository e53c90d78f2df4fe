"""`testbed run --out /tmp/...` from this machine: the bundle lands where the user named.

On a machine that cannot run experiments natively, `testbed run` re-runs itself inside
`testbed vm`, whose /tmp is a private overlay; the results folder is shared into the VM
so the bundle reaches this machine, and the last line names where it is.  (Where native
runs are possible the same command runs here, and the same must hold.)  Runs on the host
(scripts/test's host integration tests), not inside the VM: it boots one itself.

    .venv/bin/pytest -m integration -s tests/integration/test_run_out_tmp.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="a run needs root"),
              pytest.mark.skipif(os.environ.get("TESTBED_IN_VM") == "1",
                                 reason="boots its own VM: run it on the host")]

REPO = Path(__file__).resolve().parents[2]
SPEC = """
name = "out-tmp"
duration = "3s"
seed = 1
stop_when_done = true

[topology]
kind = "multipath"
paths = [{ name = "wire", bw = "5Mbit", delay = "5ms", queue = 50 }]

[transport]
protocol = "tcp"

[[workload]]
kind = "bulk"
src = "client"
dst = "server"
size = "200KB"

[sampler]
enabled = false
"""


def test_results_under_tmp_reach_this_machine():
    tmp = Path(tempfile.mkdtemp(prefix="testbed-out-", dir="/tmp"))
    try:
        spec = tmp / "spec.toml"
        spec.write_text(SPEC)
        out = tmp / "results"
        res = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(spec),
                              "--out", str(out)], capture_output=True, text=True,
                             timeout=1200, cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
        print(res.stderr[-2000:])
        assert res.returncode == 0, res.stderr[-2000:]
        metas = list(out.glob("*/metadata.json"))
        assert len(metas) == 1, f"no bundle in {out}: {sorted(out.rglob('*'))[:20]}"
        assert json.loads(metas[0].read_text())["status"] == "complete"
        assert (metas[0].parent / "metrics" / "flows.parquet").is_file()
        assert (out / "summary.parquet").is_file()
        last = res.stderr.strip().splitlines()[-1]
        assert f"results in {out}" in last or f"results in {out.resolve()}" in last, last
        assert "private to the VM" not in res.stderr
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
