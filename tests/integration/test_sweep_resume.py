"""A real sweep in the VM: 2 values over a small multipath spec (repetitions expand
the same way, tests/unit; two runs keep CI short).

Checks, with real networks: 2 complete bundles and a 2-row summary; a sweep interrupted
(SIGINT) after its first run completed leaves that run untouched and a re-run redoes
only what was not complete; ``testbed query`` joins runs and flows.  It prints the
fixed per-run overhead (set-up + teardown, from each bundle's ``timing``).

    testbed vm -- .venv/bin/pytest -m integration -s tests/integration/test_sweep_resume.py
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="a run needs root"),
              pytest.mark.needs_kernel("netem", "ovs", "mptcp")]

SPEC = """
name = "itsweep"
duration = "30s"
seed = 7
repetitions = 1
stop_when_done = true

[topology]
kind = "multipath"
paths = [
  { name = "wifi", bw = "8Mbit", delay = "5ms", queue = 100 },
  { name = "cell", bw = "4Mbit", delay = "15ms", queue = 100 },
]

[transport]
protocol = "mptcp"

[[workload]]
name = "down"
kind = "bulk"
src = "server"
dst = "client"
size = "300KB"

[[workload]]
kind = "ping"
src = "client"
dst = "server"
interval = "200ms"
count = 5

[sampler]
interval = "500ms"

[sweep]
"transport.cc" = ["reno", "cubic"]
"""

TESTBED = [sys.executable, "-m", "testbed.cli"]
REPO = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def _statuses(out: Path) -> dict[str, str]:
    found = {}
    for meta in out.glob("*/metadata.json"):
        try:
            found[meta.parent.name] = json.loads(meta.read_text())["status"]
        except (OSError, ValueError, KeyError):
            found[meta.parent.name] = "?"
    return found


def test_sweep_interrupt_resume_and_query(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    out = tmp_path / "out"
    cmd = [*TESTBED, "run", str(spec), "--out", str(out), "--no-vm"]

    # 1. start the sweep; interrupt it once the first run is complete
    log1 = open(tmp_path / "first.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=log1, stderr=subprocess.STDOUT, env=_env(), cwd=REPO)
    deadline = time.time() + 2400
    while time.time() < deadline and proc.poll() is None:
        if "complete" in _statuses(out).values():
            break
        time.sleep(0.5)
    assert proc.poll() is None, (tmp_path / "first.log").read_text()
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(timeout=300)
    log1.close()
    first_log = (tmp_path / "first.log").read_text()
    assert rc == 130, first_log
    st = _statuses(out)
    done = sorted(k for k, v in st.items() if v == "complete")
    assert len(done) >= 1, st
    assert all(v in ("complete", "interrupted") for v in st.values()), st
    kept = {k: (out / k / "metadata.json").read_bytes() for k in done}

    # 2. re-run: nothing complete is redone, everything ends complete
    res = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=REPO,
                         timeout=4800)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{len(done)} of 2 runs already complete" in res.stderr
    st = _statuses(out)
    assert len(st) == 2 and set(st.values()) == {"complete"}, st
    for k, blob in kept.items():
        assert (out / k / "metadata.json").read_bytes() == blob, f"{k} was rewritten"
    summary = pd.read_parquet(out / "summary.parquet")
    assert len(summary) == 2 and set(summary["status"]) == {"complete"}
    assert sorted(summary["transport.cc"]) == ["cubic", "reno"]

    # 3. every bundle has what the contract lists
    for run in st:
        b = out / run
        # (samples/cwnd.jsonl only appears once an ss sample caught a socket: in a busy
        # software-emulated VM one ss takes seconds, longer than these short flows)
        for rel in ("spec.toml", "transcript.jsonl", "commands.sh", "samples/flows.jsonl",
                    "samples/ping.jsonl", "samples/ss-server.txt", "metrics/flows.parquet",
                    "metrics/ping.parquet", "metrics/cwnd.parquet"):
            assert (b / rel).is_file(), f"{run}: {rel} missing"
        assert list((b / "pcap").glob("*.pcap")), f"{run}: no captures"
        meta = json.loads((b / "metadata.json").read_text())
        assert meta["interfaces"] and meta["t0"] and meta["versions"]["git_revision"]
        assert meta["transport"]["client"]["protocol"] == "mptcp"
        assert meta["flows"]["failed"] == 0, meta["flows"]

    # 4. query: a join of runs and flows
    q = ('SELECT r."transport.cc" AS cc, count(*) AS n, sum(f.bytes) AS bytes '
         "FROM runs r JOIN flows f USING (run_id) GROUP BY 1 ORDER BY 1")
    res = subprocess.run([*TESTBED, "query", str(out), q, "--csv"], capture_output=True,
                         text=True, env=_env(), cwd=REPO, timeout=300)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines[0] == "cc,n,bytes" and [ln.split(",")[0] for ln in lines[1:]] == \
        ["cubic", "reno"]
    assert all(int(ln.split(",")[1]) >= 1 and float(ln.split(",")[2]) > 0 for ln in lines[1:])

    # 5. the fixed per-run overhead (printed for the record; run with -s)
    rows = []
    for run in sorted(st):
        t = json.loads((out / run / "metadata.json").read_text())["timing"]
        rows.append((run, t.get("preflight", 0), t.get("set-up", 0), t.get("traffic", 0),
                     t.get("teardown", 0), t.get("analysis", 0)))
    print("\nrun                       preflight  set-up  traffic  teardown  analysis")
    for r in rows:
        print(f"{r[0]:26s} {r[1]:8.1f} {r[2]:7.1f} {r[3]:8.1f} {r[4]:9.1f} {r[5]:9.1f}")
    overhead = [r[2] + r[4] for r in rows]
    print(f"fixed overhead (set-up + teardown): mean {sum(overhead) / len(overhead):.1f}s")
