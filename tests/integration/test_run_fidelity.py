"""Runs whose numbers can be trusted, through `testbed run` with real networks (issue 16).

* A TCP flow pinned to one path of a multipath network, captured at both ends: at most
  0.1 % of its data segments (sent once) arrive after a segment the sender sent later
  -- counted from the captures by the project's metric (flows.ooo_packets); the run's
  fidelity verdict names the first ping sample exactly when it is over 5 % + 2 ms of the
  configured RTT (how often it is: benchmarks/fidelity.py), and is ``ok`` otherwise.
* An overloaded run (two TCP flows on two 1 Gbit/s paths in the software-emulated VM)
  gets a verdict other than ``ok`` that names why.
* A sweep whose second run's flow cannot finish: that run is ``failed``, the command
  exits non-zero, the first run stays as it was.

    testbed vm -- .venv/bin/pytest -m integration -s tests/integration/test_run_fidelity.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="a run needs root"),
              pytest.mark.needs_kernel("netem", "ovs")]

TESTBED = [sys.executable, "-m", "testbed.cli"]
REPO = Path(__file__).resolve().parents[2]

PINNED = """
name = "fid-pinned"
duration = "8s"
seed = 3
stop_when_done = false

[topology]
kind = "multipath"
paths = [
  { name = "wifi", bw = "10Mbit", delay = "10ms", queue = 100 },
  { name = "cell", bw = "5Mbit", delay = "20ms", queue = 100 },
]

[transport]
protocol = "tcp"
cc = "cubic"

[[workload]]
name = "pinned"
kind = "bulk"
src = "client"
dst = "server"
size = "3MB"
via = "wifi"
start = "1s"

[[workload]]
name = "rtt"
kind = "ping"
src = "client"
dst = "server"
via = "cell"
interval = "500ms"

[sampler]
enabled = false
"""

OVERLOADED = """
name = "fid-overload"
duration = "5s"
seed = 1
stop_when_done = false

[topology]
kind = "multipath"
paths = [
  { name = "a", bw = "1Gbit", delay = "1ms", queue = 1000 },
  { name = "b", bw = "1Gbit", delay = "1ms", queue = 1000 },
]

[transport]
protocol = "tcp"
cc = "cubic"

[[workload]]
name = "bulk-a"
kind = "bulk"
src = "client"
dst = "server"
duration = "4s"
via = "a"

[[workload]]
name = "bulk-b"
kind = "bulk"
src = "client"
dst = "server"
duration = "4s"
via = "b"

[sampler]
enabled = false
"""

FAILING = """
name = "fid-fail"
duration = "4s"
seed = 1
stop_when_done = true

[topology]
kind = "multipath"
paths = [{ name = "wire", bw = "5Mbit", delay = "5ms", queue = 100 }]

[transport]
protocol = "tcp"

[[workload]]
name = "bulk"
kind = "bulk"
src = "client"
dst = "server"
size = "100KB"

[capture]
enabled = false

[sampler]
enabled = false

[sweep]
"workload.0.size" = ["100KB", "200MB"]
"""


def _run(spec_text: str, tmp: Path, name: str, *extra: str) -> tuple[int, Path, str]:
    spec = tmp / f"{name}.toml"
    spec.write_text(spec_text)
    out = tmp / name
    res = subprocess.run([*TESTBED, "run", str(spec), "--out", str(out), "--no-vm", *extra],
                         capture_output=True, text=True, timeout=900,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    print(res.stderr[-3000:])
    return res.returncode, out, res.stderr


def _bundle(out: Path) -> tuple[dict, Path]:
    [run] = [p for p in out.iterdir() if (p / "metadata.json").is_file()]
    return json.loads((run / "metadata.json").read_text()), run


def test_pinned_tcp_flow_is_not_reordered_and_a_late_first_ping_is_named(tmp_path):
    rc, out, err = _run(PINNED, tmp_path, "pinned")
    assert rc == 0, err
    meta, run = _bundle(out)
    assert meta["status"] == "complete"
    flows = pd.read_parquet(run / "metrics" / "flows.parquet")
    [pinned] = flows[flows["workload"] == "pinned"].to_dict("records")
    counted = pinned["data_packets"]
    late = pinned["ooo_packets"]
    print(f"FIGURES pinned flow: {late:.0f} of {counted} segments arrived after a later "
          f"one; RFC 4737 reordered {pinned['reordered_packets']}; "
          f"{pinned['throughput_bps'] / 1e6:.2f} Mbit/s")
    assert counted > 1000
    assert late <= 0.001 * counted
    # first ping: 2 x 20 ms on the cell path, within 5 % + 2 ms
    ping = pd.read_parquet(run / "metrics" / "ping.parquet").sort_values("t")
    first = float(ping["rtt_ms"].dropna().iloc[0])
    print(f"FIGURES first ping {first:.2f} ms (configured 40 ms); fidelity "
          f"{meta['fidelity']['verdict']} {meta['fidelity']['reasons']} "
          f"{meta['fidelity']['checks']}")
    # Whether the first ping is on time depends on how fast this machine emulates: in the
    # VM it read 42.3-58.4 ms over 2 x 20 ms (and 75.2 on a slower CI machine), with the
    # network warmed before t0 (docs/fidelity.md); the target lives in
    # benchmarks/fidelity.py ("first RTT ms").  What the testbed must do is measure it
    # and say so: the verdict names the first RTT exactly when it is over 5 % + 2 ms.
    fid = meta["fidelity"]
    assert fid["checks"]["first_rtt_ms"] == pytest.approx(first, abs=0.001)
    late = first > 40 * 1.05 + 2
    assert any("first RTT" in r for r in fid["reasons"]) == late, fid["reasons"]
    assert (fid["verdict"] == "ok") == (not fid["reasons"]), fid
    if not late:  # nothing else in this small run may go wrong
        assert fid["verdict"] == "ok", fid["reasons"]
    summary = pd.read_parquet(out / "summary.parquet")
    assert summary.loc[0, "fidelity"] == fid["verdict"]
    assert f"fidelity {fid['verdict']}" in err


def test_an_overloaded_run_is_not_ok_and_says_why(tmp_path):
    rc, out, err = _run(OVERLOADED, tmp_path, "overload")
    assert rc == 0, err
    meta, run = _bundle(out)
    fid = meta["fidelity"]
    flows = pd.read_parquet(run / "metrics" / "flows.parquet")
    mbit = float(flows["throughput_bps"].max()) / 1e6
    print(f"FIGURES overloaded: best bulk flow {mbit:.1f} Mbit/s on a 1000 Mbit/s path; "
          f"{fid['verdict']} {fid['reasons']} {fid['checks']}")
    if os.environ.get("TESTBED_VM_ACCEL") != "tcg":
        pytest.skip("1 Gbit/s overloads only the software-emulated VM; measured here: "
                    f"{fid['verdict']} {fid['reasons']}")
    assert fid["verdict"] in ("warn", "fail")
    assert fid["reasons"] and all(": " in r for r in fid["reasons"])
    assert f"fidelity {fid['verdict']}" in err


def test_a_run_whose_flow_did_not_finish_fails_and_earlier_runs_stay(tmp_path):
    rc, out, err = _run(FAILING, tmp_path, "failing", "--fail-fast")
    assert rc != 0, err
    statuses = {}
    for meta_path in out.glob("*/metadata.json"):
        meta = json.loads(meta_path.read_text())
        statuses[meta["params"]["workload.0.size"]] = (meta["status"], meta.get("error"))
    assert statuses["100KB"][0] == "complete"
    assert statuses["200MB"][0] == "failed"
    assert "1 of 1 flows did not finish" in statuses["200MB"][1]
    summary = pd.read_parquet(out / "summary.parquet")
    assert sorted(summary["status"]) == ["complete", "failed"]
    # the failed run left the complete one as it was: nothing in it written after the
    # failed run started
    metas = {json.loads(p.read_text())["status"]: p for p in out.glob("*/metadata.json")}
    started = json.loads(metas["failed"].read_text())["t_started"]
    touched = [str(f) for f in metas["complete"].parent.rglob("*")
               if f.is_file() and f.stat().st_mtime > started]
    assert touched == [], touched
