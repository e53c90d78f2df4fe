"""Why the fidelity benchmark once printed 0 Mbit/s for half its cells: iperf3's start race.

Runs the old pattern on one shaped link (`topologies.pair.PairTopo`), back to back for
the 12 rate/delay pairs of `benchmarks/fidelity.py`: an iperf3 one-off server on port
5201 started, the client started at once (no wait until the server listens), then the
server stopped.  Prints, per test, iperf3's exit code, its goodput and the ``error`` of
its JSON report, and the server's sockets right after.  A test whose client connected
before the server listened reads ``unable to connect to server: Connection refused``
with exit code 0, which the old benchmark took for success (docs/fidelity.md, section
5).  Exits 1 when any test failed that way, 0 when none did.

    testbed vm -- .venv/bin/python benchmarks/iperf_start_race.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from testbed.core.commands import CommandRunner
from testbed.host.traffic.iperf import (
    iperf3_client_argv,
    iperf3_server_argv,
    parse_iperf3_json,
)
from testbed.net.network import Network
from testbed.net.shaping import LinkShape
from topologies.pair import PairTopo

COMBOS = [(r, d) for r in (5, 10, 20, 50) for d in (1, 10, 50)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="iperf3 seconds per test")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/testbed-iperf-race"))
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("iperf_start_race: needs root (run it in `testbed vm`)", file=sys.stderr)
        return 2
    runner = CommandRunner()
    failed = silent = 0
    print(f"{'rate':>8} {'delay':>6} | {'exit':>4} {'Mbit/s':>7} | iperf3 error; server "
          "sockets right after")
    try:
        with Network(PairTopo(shape=LinkShape(bw_bps=5_000_000, delay_s=0.001)),
                     runner=runner, workdir=args.workdir) as net:
            h1, h2 = net.host("h1"), net.host("h2")
            for mbit, ms in COMBOS:
                net.set_shape("link", LinkShape(bw_bps=mbit * 10**6, delay_s=ms / 1e3))
                srv = runner.spawn(iperf3_server_argv(5201), host=h2)
                try:
                    res = runner.run([*iperf3_client_argv("10.0.0.2", 5201,
                                                          duration=args.seconds), "-O", "1"],
                                     host=h1, timeout=args.seconds + 60, check=False)
                    ss = runner.run(["ss", "-Htln", "sport = :5201"], host=h2,
                                    check=False).stdout.split()
                finally:
                    srv.stop()
                out = parse_iperf3_json(res.stdout)
                try:
                    error = json.loads(res.stdout).get("error")
                except ValueError:
                    error = f"no JSON report: {res.stderr.strip()[-120:]}"
                failed += bool(error)
                silent += bool(error) and res.returncode == 0
                rate = (f"{out['goodput_bps'] / 1e6:7.2f}" if out.get("goodput_bps")
                        else f"{'-':>7}")
                print(f"{mbit:>3} Mbit {ms:>3} ms | {res.returncode:>4} {rate} | "
                      f"{error or '-'}; {' '.join(ss[:1]) or 'no socket'}", flush=True)
                time.sleep(0.2)
    finally:
        runner.stop_all()
    print(f"\n{failed} of {len(COMBOS)} tests failed, {silent} of them with iperf3 exit code 0")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
