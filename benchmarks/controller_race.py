"""Does the controller program all 20 switches of a k=4 fat-tree that connect at once?

Starts the real controller (``python -m controllers APP``, through
`controllers.launcher.ControllerProcess`) --reps times, each with 20 fake OpenFlow 1.3
switches (`controllers.testing.FakeSwitch`, threads on loopback: hello, features, port
list, barrier, echo) connecting at the same moment, and prints one row per start and a
total: how many switches were programmed, in how long, and the exception names the
controller logged.

``--switch-interval S`` sets Python's thread switch interval in the controller (default
5 ms): a tiny value (1e-6) lets the CPU pass between threads far more often, as the slow
software-emulated VM did, which made the stall of docs/controllers.md ("Why the
controller once stalled") show here in about 3 starts of 100 before its fix.  No root, no
Open vSwitch::

    .venv/bin/python benchmarks/controller_race.py --reps 100 --switch-interval 1e-6
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from controllers import launcher  # noqa: E402
from controllers.launcher import ControllerProcess, parse_status, readiness  # noqa: E402
from controllers.paths import compute_routes  # noqa: E402
from controllers.testing import FakeSwitch, free_port  # noqa: E402
from testbed.core.commands import CommandRunner  # noqa: E402
from testbed.core.errors import RunError  # noqa: E402
from topologies.fattree import fattree_layout  # noqa: E402

# runs ``python -m controllers ARGS`` with the thread switch interval given first
WITH_INTERVAL = """
import runpy, sys
sys.setswitchinterval(float(sys.argv[1]))
sys.argv = ["controllers", *sys.argv[2:]]
runpy.run_module("controllers", run_name="__main__", alter_sys=True)
"""


def one_start(app: str, timeout: float, workdir: Path) -> dict[str, Any]:
    """Start the controller, connect all switches at once; what happened (one table row)."""
    layout = fattree_layout(4)
    adj = compute_routes(layout).adj
    port = free_port()
    ctl = ControllerProcess(app, layout, port=port, log=workdir / "controller.log",
                            runner=CommandRunner(), start_timeout=60, stall_s=3600,
                            max_restarts=0, inactivity_probe_ms=None)
    switches = [FakeSwitch(port, sw.dpid, sorted(adj.ports[sw.name]), timeout=300)
                for sw in layout.switches]
    dpids = [sw.dpid for sw in layout.switches]
    t0 = time.time()
    outcome = "ok"
    try:
        ctl.start()
        for sw in switches:
            sw.start()
        try:
            ctl.wait_ready(dpids, timeout)
        except RunError:
            outcome = "STALLED"
        elapsed = time.time() - t0
        ready, _ = readiness(parse_status(ctl.status_file.read_text()), dpids)
    finally:
        for sw in switches:
            sw.close()
        ctl.stop()
    log = ctl.log.read_text(errors="replace")
    errors = sorted(set(re.findall(r"^(\w+(?:Error|Exception)):", log, re.MULTILINE)))
    return {"ready": len(ready), "seconds": elapsed, "outcome": outcome,
            "logged": ",".join(errors) or "-", "log": str(ctl.log)}


def main(argv: list[str] | None = None) -> int:
    """Run the starts and print the table; exit 1 if any start stalled."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--app", default="single_path", help="fabric app (default single_path)")
    ap.add_argument("--reps", type=int, default=20, help="controller starts (default 20)")
    ap.add_argument("--switch-interval", type=float, default=0.005,
                    help="the controller's sys.setswitchinterval (default 0.005)")
    ap.add_argument("--timeout", type=float, default=10.0,
                    help="seconds for all switches to be programmed (default 10)")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="keep each start's controller log here (default: a temp folder)")
    args = ap.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="controller-race-"))
    real_argv = launcher.controller_argv

    def argv_with_interval(python: str, *rest: Any) -> list[str]:
        return [python, "-c", WITH_INTERVAL, repr(args.switch_interval),
                *real_argv(python, *rest)[3:]]

    launcher.controller_argv = argv_with_interval  # type: ignore[assignment]
    print(f"{'start':>5} {'ready':>5} {'seconds':>8} {'outcome':8} logged")
    stalled = 0
    for rep in range(args.reps):
        row = one_start(args.app, args.timeout, workdir / f"start{rep}")
        stalled += row["outcome"] != "ok"
        print(f"{rep:>5} {row['ready']:>3}/20 {row['seconds']:>8.2f} {row['outcome']:8} "
              f"{row['logged']}" + (f"  ({row['log']})" if row["outcome"] != "ok" else ""),
              flush=True)
    print(f"stalled {stalled} of {args.reps} starts (switch interval {args.switch_interval:g} s,"
          f" app {args.app}); logs under {workdir}")
    return 1 if stalled else 0


if __name__ == "__main__":
    sys.exit(main())
