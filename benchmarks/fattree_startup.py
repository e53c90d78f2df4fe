"""How long does a k=4 fat-tree take to come up under a controller, and does it always?

Builds the fat-tree (`topologies.fattree.FatTreeTopo`, 10 Mbit/s links) with an os-ken
fabric app (`controllers.launcher.ControllerProcess`) --reps times, each on a fresh
network, and prints per repetition:

* ``up_s``: `Network.start` from call to return (links, switches, rules, shaping);
* ``switches_s``: from the first switch programmed to the last one;
* ``gap_s``: mean / max time between consecutive switches being programmed;
* ``swap_s``: replacing the controller process (``--swap APP``) until every switch is
  re-programmed, as the fat-tree tests and study sweeps do;
* ``down_s``: `Network.stop`;
* the outcome; a failed repetition keeps OVS's controller records
  (``ovs-controllers.txt``) and ``ovs-vswitchd.log`` in its directory under --workdir
  (``rep<N>/net`` when the start failed).

Needs root, Open vSwitch, sch_netem and nftables; where the kernel lacks them::

    .venv/bin/testbed vm --memory 3G -- .venv/bin/python benchmarks/fattree_startup.py
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from controllers.launcher import ControllerProcess, parse_status
from testbed.core.commands import CommandRunner
from testbed.core.errors import TestbedError
from testbed.net.cleanup import keep_ovs_state
from testbed.net.network import Network
from topologies.fattree import FatTreeTopo

VM_HINT = ".venv/bin/testbed vm --memory 3G -- .venv/bin/python benchmarks/fattree_startup.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def why_not_native(runner: CommandRunner) -> str | None:
    """The reason this machine cannot run the benchmark natively, or None."""
    if os.geteuid() != 0:
        return "it needs root"
    for mod in ("sch_netem", "openvswitch"):
        if not (Path(f"/sys/module/{mod}").exists()
                or runner.ok(["modprobe", "-q", mod], record=False)):
            return f"the kernel lacks {mod}"
    if not runner.ok(["ovs-vsctl", "--timeout=5", "show"], record=False):
        return "Open vSwitch is not running"
    return None


def programmed_times(ctl: ControllerProcess) -> list[float]:
    """When each switch was first acknowledged ready, sorted (from the status file)."""
    seen: dict[int, float] = {}
    for ev in parse_status(ctl.status_file.read_text()):
        if ev.get("event") == "ready":
            seen.setdefault(int(ev["dpid"]), float(ev["t"]))
    return sorted(seen.values())


def one_rep(runner: CommandRunner, workdir: Path, app: str, swap: str | None,
            timeout: float) -> dict[str, Any]:
    """Start, optionally swap, stop one fat-tree network; its figures."""
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    topo = FatTreeTopo(4, bw=10)
    port = free_port()
    ctl = ControllerProcess(app, topo, port=port, runner=runner,
                            log=workdir / f"controller-{app}.log")
    net = Network(topo, runner=runner, controller=ctl, workdir=workdir / "net",
                  ready_timeout=timeout)
    row: dict[str, Any] = {"app": app}
    t0 = time.time()
    try:
        net.start()  # on failure OVS's state is kept in workdir/net
        row["up_s"] = time.time() - t0
        times = programmed_times(ctl)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        row["switches_s"] = times[-1] - times[0]
        if gaps:
            row["gap_mean_s"], row["gap_max_s"] = statistics.fmean(gaps), max(gaps)
        else:  # not a zero: there is no gap to measure
            row["unmeasured"] = (f"gaps between switches: {len(times)} switch(es) seen "
                                 "programmed, need 2")
        if swap:
            ctl.stop()
            new = ControllerProcess(swap, topo, port=port, runner=runner,
                                    log=workdir / f"controller-{swap}.log")
            t1 = time.time()
            new.start()
            new.pre_switch_start(net)
            try:
                new.wait_ready([int(s.dpid, 16) for s in net.mn.switches], timeout)
            except TestbedError:
                keep_ovs_state(runner, workdir)
                new.stop()
                raise
            row["swap_s"] = time.time() - t1
            net.controller = new  # the network stops it
        row["ok"] = True
    except TestbedError as exc:
        row["ok"] = False
        row["error"] = str(exc)[:300]
    finally:
        t2 = time.time()
        net.stop()
        row["down_s"] = time.time() - t2
    return row


def fmt(row: dict[str, Any], key: str) -> str:
    v = row.get(key)
    return f"{v:8.1f}" if isinstance(v, float) else f"{'-':>8}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="fresh networks to start (3)")
    ap.add_argument("--app", default="single_path", help="controller app (single_path)")
    ap.add_argument("--swap", default="ecmp",
                    help="app to swap in after start-up; 'none' skips (ecmp)")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds to wait for every switch to be programmed (600)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    ap.add_argument("--workdir", type=Path, default=Path("results/bench-fattree"),
                    help="per-repetition logs (kept: the VM's /tmp is not)")
    args = ap.parse_args(argv)
    runner = CommandRunner()
    why = why_not_native(runner)
    if why:
        print(f"fattree_startup: cannot run natively here ({why}); run it in the VM:\n"
              f"  {VM_HINT}", file=sys.stderr)
        return 2
    swap = None if args.swap == "none" else args.swap
    rows = []
    try:
        for i in range(args.reps):
            print(f"repetition {i + 1}/{args.reps} ...", flush=True)
            row = one_rep(runner, args.workdir / f"rep{i + 1}", args.app, swap, args.timeout)
            print(f"  {json.dumps(row)}", flush=True)
            rows.append(row)
    finally:
        runner.stop_all()
    print(f"\nk=4 fat-tree start-up, app {args.app}, swap to {swap or '-'} "
          f"(kernel {os.uname().release}, {os.cpu_count()} CPUs)")
    print(f"{'rep':>3} {'up_s':>8} {'switch_s':>8} {'gap_mean':>8} {'gap_max':>8} "
          f"{'swap_s':>8} {'down_s':>8}  outcome")
    for i, row in enumerate(rows, 1):
        outcome = ("ok" if row["ok"] and "unmeasured" not in row else
                   f"not measured: {row['unmeasured']}" if row["ok"] else
                   f"FAILED: {row['error']}")
        print(f"{i:3d} {fmt(row, 'up_s')} {fmt(row, 'switches_s')} {fmt(row, 'gap_mean_s')} "
              f"{fmt(row, 'gap_max_s')} {fmt(row, 'swap_s')} {fmt(row, 'down_s')}  {outcome}")
    good = sum(r["ok"] for r in rows)
    print(f"{good} of {len(rows)} repetitions came up")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if good == len(rows) and not any("unmeasured" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
