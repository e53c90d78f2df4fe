"""Everything a ``[[schedule]]`` and a path may say, run for real through the CLI (issue 25).

A 4 s multipath run at 10 Mbit/s: path ``wifi`` with normally distributed jitter kept in
order (``distribution``, ``reorder = false``), path ``cell`` with Gilbert-Elliott loss
(``ge``); ``wifi`` goes ``down`` at 1 s and comes back with ``up = true`` at 2 s; a
3-row CSV trace written next to the spec changes ``cell``'s rate from 0.5 s on, and
``wifi``'s delay changes at 3 s (a netem ``change`` that must keep its distribution and
in-order rate).  The run must be complete, its ``metrics/events.parquet`` must hold each
of the six events (link, up, bw, delay) at its planned time with no error, and its
commands the netem options.

    testbed vm -- .venv/bin/pytest -m integration -s tests/integration/test_schedule_spec.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from testbed.core.compat import tomllib

pytestmark = [pytest.mark.integration, pytest.mark.needs_kernel("netem", "ovs")]

TESTBED = [sys.executable, "-m", "testbed.cli"]
REPO = Path(__file__).resolve().parents[2]

SPEC = """
name = "itschedule"
duration = "4s"

[topology]
kind = "multipath"

[[topology.paths]]
name = "wifi"
bw = "10Mbit"
delay = "10ms"
jitter = "2ms"
distribution = "normal"
reorder = false

[[topology.paths]]
name = "cell"
bw = "10Mbit"
delay = "20ms"
ge = { p = "1%", r = "30%" }

[[workload]]
kind = "ping"
src = "client"
dst = "server"
interval = "100ms"
via = "wifi"

[[workload]]
kind = "ping"
src = "client"
dst = "server"
interval = "100ms"
via = "cell"

[[schedule]]
at = "1s"
link = "wifi"
down = true

[[schedule]]
at = "2s"
link = "wifi"
up = true

[[schedule]]
link = "cell"
trace = "cell.csv"
at = "500ms"

[[schedule]]
at = "3s"
link = "wifi"
delay = "15ms"
"""
TRACE = "time,bw\n0s,5Mbit\n1s,2Mbit\n2s,10Mbit\n"
# (seconds after t0, link, changes) of every event, in time order
EXPECTED = [(0.5, "cell", {"bw_bps": 5_000_000}), (1.0, "wifi", {"up": False}),
            (1.5, "cell", {"bw_bps": 2_000_000}), (2.0, "wifi", {"up": True}),
            (2.5, "cell", {"bw_bps": 10_000_000}), (3.0, "wifi", {"delay_s": 0.015})]


def test_a_spec_with_up_trace_distribution_reorder_and_ge_runs(tmp_path: Path) -> None:
    folder = tmp_path / "spec"
    folder.mkdir()
    (folder / "spec.toml").write_text(SPEC)
    (folder / "cell.csv").write_text(TRACE)
    out = tmp_path / "out"
    res = subprocess.run([*TESTBED, "run", str(folder / "spec.toml"), "--out", str(out),
                          "--no-vm"], capture_output=True, text=True, timeout=900, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    print(res.stderr[-3000:])
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    [run] = [p for p in out.iterdir() if (p / "metadata.json").is_file()]
    meta = json.loads((run / "metadata.json").read_text())
    assert meta["status"] == "complete", meta.get("problems")

    events = pd.read_parquet(run / "metrics" / "events.parquet").sort_values("t_planned")
    assert events["error"].isna().all(), events["error"].tolist()
    got = [(round(float(r.t_planned) - float(meta["t0"]), 3), r.link, json.loads(r.changes))
           for r in events.itertuples()]
    assert got == EXPECTED
    assert (events["t_applied"] >= events["t_planned"]).all()
    assert meta["fidelity"]["checks"]["event_late_ms_max"] is not None  # every event judged

    commands = (run / "commands.sh").read_text()
    assert "netem delay 10000us 2000us distribution normal rate 10000000000bit" in commands
    assert "netem delay 20000us loss gemodel 1% 30% 100% 0%" in commands
    # a change states the whole netem configuration: the path's distribution, in-order
    # rate and Gilbert-Elliott loss stay
    assert "change dev s1-eth1 root handle 1: netem delay 15000us 2000us distribution normal " \
        "rate 10000000000bit" in commands
    assert "change dev s2-eth1 root handle 1: netem delay 20000us loss gemodel" in commands
    resolved = tomllib.loads((run / "spec.toml").read_text())  # re-runs without cell.csv
    assert not any("trace" in e for e in resolved["schedule"])
    assert len(resolved["schedule"]) == 6
