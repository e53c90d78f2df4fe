"""Wall time of one sweep run locally and on a Ray cluster of --workers worker nodes.

The sweep is a small multipath spec (8/4 Mbit/s paths, one 200 KB MPTCP transfer and a
few pings per run, --runs runs).  It runs once with ``testbed run`` here and once with
``--executor ray`` on a cluster of a head and --workers worker nodes started on this
machine (`testbed.run.cluster.localcluster.LocalCluster`).  Both run the way this machine
can: natively when its kernel has netem, Open vSwitch and MPTCP; else inside
``testbed vm`` -- the local sweep in one boot for all its runs, each cluster run in a boot
of its own, as a node does.  On one machine the runs still happen one at a time (the
machine's emulation lock, docs/cluster.md), so the table shows the cluster's cost per
run, not the speed-up that more machines would bring.  It prints a table: the sweep, how
its runs happened, its runs, its wall time, the wall time per run, and the cluster's
start-up time.  Needs root; run it on the machine itself, not inside ``testbed vm`` (a
Ray cluster does not come up under the VM's software emulation)::

    .venv/bin/python benchmarks/ray_sweep.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SPEC = """
name = "bench-ray"
duration = "20s"
seed = 5
repetitions = {reps}
stop_when_done = true

[topology]
kind = "multipath"
paths = [
  {{ name = "wifi", bw = "8Mbit", delay = "5ms", queue = 100 }},
  {{ name = "cell", bw = "4Mbit", delay = "15ms", queue = 100 }},
]

[transport]
protocol = "mptcp"

[[workload]]
kind = "bulk"
src = "server"
dst = "client"
size = "200KB"

[[workload]]
kind = "ping"
src = "client"
dst = "server"
interval = "200ms"
count = 5

[sweep]
"transport.cc" = ["reno", "cubic"]
"""


def _sweep(argv: list[str], out: Path) -> tuple[float, int, str]:
    """Run one sweep command; (wall s, complete runs, the tail of its output)."""
    t = time.time()
    res = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    wall = time.time() - t
    done = 0
    for meta in out.glob("*/metadata.json"):
        done += json.loads(meta.read_text()).get("status") == "complete"
    return wall, done, (res.stdout + res.stderr)[-600:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=4, help="runs in the sweep (even; default 4)")
    ap.add_argument("--workers", type=int, default=2, help="worker nodes (default 2)")
    args = ap.parse_args()
    from testbed.run.cluster.localcluster import LocalCluster
    from testbed.run.cluster.node import node_mode

    mode, lacks = node_mode()
    if mode is None:
        print(f"runs are possible neither natively nor in `testbed vm` here: {lacks}",
              file=sys.stderr)
        return 2
    how_local = "native" if mode == "native" else "testbed vm, 1 boot"
    how_ray = "native" if mode == "native" else "testbed vm, 1 boot per run"

    work = Path(tempfile.mkdtemp(prefix="tbbench"))
    spec = work / "spec.toml"
    spec.write_text(SPEC.format(reps=max(1, args.runs // 2)))
    testbed = [sys.executable, "-m", "testbed.cli", "run", str(spec)]
    rows = []
    local_wall, local_done, tail = _sweep([*testbed, "--out", str(work / "local")],
                                          work / "local")
    rows.append(("local", how_local, local_done, local_wall, "", tail))
    cluster = LocalCluster(work / "r", workers=args.workers,
                           env={"TESTBED_CLUSTER_SCRATCH": str(work / "scratch")})
    try:
        t = time.time()
        cluster.start(timeout=900)
        up = time.time() - t
        wall, done, tail = _sweep([*testbed, "--out", str(work / "ray"), "--executor", "ray",
                                   "--address", cluster.address], work / "ray")
        rows.append((f"ray, {args.workers} workers on 1 machine", how_ray, done, wall,
                     f"{up:.0f}", tail))
    finally:
        cluster.stop()
    print(f"\n{'sweep':32s} {'runs happen':28s} {'runs':>5s} {'wall s':>8s} {'s/run':>7s} "
          f"{'cluster up s':>13s}")
    for name, how, done, wall, up, _tail in rows:
        per = f"{wall / done:7.1f}" if done else "      -"
        print(f"{name:32s} {how:28s} {done:5d} {wall:8.1f} {per} {up:>13s}")
    short = [(name, done, tail) for name, _how, done, _wall, _up, tail in rows
             if done < args.runs]
    for name, done, tail in short:  # its s/run is unmeasured ("-"), and says why here
        print(f"\n{name}: only {done} of {args.runs} runs complete:\n{tail}")
    return 1 if short else 0


if __name__ == "__main__":
    raise SystemExit(main())
