"""Link-emulation fidelity: configured vs measured rate and RTT, multi-path, event latency.

Prints three tables:

1. two hosts over one shaped link (`topologies.pair.PairTopo`): for 5/10/20/50 Mbit/s x
   1/10/50 ms one-way delay, the mean ping RTT against 2 x delay and the iperf3 TCP
   goodput (receiver side, first second left out) against the rate.  One network is
   built and each configuration is set with ``tc qdisc change`` (as schedules do).
2. a two-path multi-homed network (10 Mbit/s 10 ms, 5 Mbit/s 40 ms): RTT and TCP per
   path (bound to the path's address), then both paths at once.
3. schedule-event latency: events played by `SchedulePlayer` on the pair network,
   ``t_applied - t_planned`` (mean / p95 / max) for rate, delay and down/up changes.

Needs root, sch_netem/sch_tbf and (for table 2) Open vSwitch.  Where the kernel lacks
them, run it inside the VM::

    .venv/bin/testbed vm -- .venv/bin/python benchmarks/fidelity.py [--quick]

``--quick`` measures a subset (10 Mbit/s x 10 ms, 5 Mbit/s x 50 ms, 20 Mbit/s x 1 ms).
Numbers from a software-emulated (TCG) VM understate what KVM or bare metal give.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from testbed.commands import CommandRunner
from testbed.errors import TestbedError
from testbed.network import Network
from testbed.schedule import LinkChange, ScheduleEvent
from testbed.shaping import LinkShape
from testbed.traffic.iperf import (
    iperf3_client_argv,
    iperf3_server_argv,
    parse_iperf3_json,
)
from testbed.traffic.ping import parse_ping_summary, ping_argv
from topologies.multipath import MultiHomedTopo, PathSpec
from topologies.pair import PairTopo

RATES_MBIT = (5, 10, 20, 50)
DELAYS_MS = (1, 10, 50)
QUICK = ((10, 10), (5, 50), (20, 1))
VM_HINT = ".venv/bin/testbed vm -- .venv/bin/python benchmarks/fidelity.py"


def why_not_native(runner: CommandRunner, need_ovs: bool) -> str | None:
    """The reason this machine cannot run the benchmark natively, or None."""
    if os.geteuid() != 0:
        return "it needs root"
    for mod in ("sch_netem", "sch_tbf") + (("openvswitch",) if need_ovs else ()):
        if not (Path(f"/sys/module/{mod}").exists()
                or runner.ok(["modprobe", "-q", mod], record=False)):
            return f"the kernel lacks {mod}"
    if need_ovs and not runner.ok(["ovs-vsctl", "--timeout=5", "show"], record=False):
        return "Open vSwitch is not running"
    return None


def tcp_mbit(runner: CommandRunner, client: Any, server: Any, addr: str, seconds: float,
             bind: str | None = None, port: int = 5201) -> float:
    """iperf3 TCP goodput in Mbit/s (receiver side, first second omitted)."""
    srv = runner.spawn(iperf3_server_argv(port), host=server)
    try:
        argv = [*iperf3_client_argv(addr, port, duration=seconds, bind=bind), "-O", "1"]
        for _ in range(50):
            res = runner.run(argv, host=client, timeout=seconds + 60, check=False)
            if res.returncode == 0:
                out = parse_iperf3_json(res.stdout)
                return (out["goodput_bps"] or 0.0) / 1e6
            time.sleep(0.1)
        raise TestbedError(f"iperf3 to {addr} failed: {res.stdout[-300:]}")
    finally:
        srv.stop()


def rtt_ms(runner: CommandRunner, host: Any, addr: str, count: int,
           bind: str | None = None) -> float:
    """Mean ping RTT in ms."""
    out = runner.run(ping_argv(addr, interval=0.05, count=count, bind=bind), host=host,
                     timeout=60, check=False).stdout
    avg = parse_ping_summary(out)["avg_ms"]
    return float("nan") if avg is None else avg


def pct(measured: float, configured: float) -> str:
    return f"{100 * measured / configured:6.1f} %"


def link_table(runner: CommandRunner, workdir: Path, combos: list[tuple[int, int]],
               seconds: float, offloads: bool = False) -> list[dict[str, Any]]:
    """Table 1: the pair network through every (rate, delay) combination."""
    rows = []
    first = LinkShape(bw_bps=combos[0][0] * 10**6, delay_s=combos[0][1] / 1e3)
    with Network(PairTopo(shape=first), runner=runner, workdir=workdir / "pair",
                 offloads=offloads) as net:
        h1, h2 = net.host("h1"), net.host("h2")
        for mbit, ms in combos:
            net.set_shape("link", LinkShape(bw_bps=mbit * 10**6, delay_s=ms / 1e3))
            rtt = rtt_ms(runner, h1, "10.0.0.2", count=20)
            tput = tcp_mbit(runner, h1, h2, "10.0.0.2", seconds)
            rows.append({"rate_mbit": mbit, "delay_ms": ms, "rtt_cfg_ms": 2 * ms,
                         "rtt_ms": rtt, "tcp_mbit": tput})
            print(f"  {mbit:3d} Mbit/s {ms:3d} ms: RTT {rtt:7.2f} ms (cfg {2 * ms}), "
                  f"TCP {tput:6.2f} Mbit/s", flush=True)
    return rows


def multipath_table(runner: CommandRunner, workdir: Path, seconds: float
                    ) -> list[dict[str, Any]]:
    """Table 2: RTT and TCP per path of a 2-path network, then both at once."""
    paths = [PathSpec("wifi", LinkShape(bw_bps=10_000_000, delay_s=0.010, queue_pkts=100)),
             PathSpec("cell", LinkShape(bw_bps=5_000_000, delay_s=0.040, queue_pkts=100))]
    topo = MultiHomedTopo(paths=paths)
    rows = []
    with Network(topo, runner=runner, workdir=workdir / "multipath") as net:
        client, server = net.host("client"), net.host("server")
        dst = topo.server_addr()
        for p in paths:
            src = topo.path(p.name).client_addr
            rtt = rtt_ms(runner, client, dst, count=20, bind=src)
            tput = tcp_mbit(runner, client, server, dst, seconds, bind=src)
            rows.append({"path": p.name, "rate_mbit": p.shape.bw_bps / 1e6,
                         "rtt_cfg_ms": p.shape.rtt_s() * 1e3, "rtt_ms": rtt, "tcp_mbit": tput})
        # both paths at once: two servers, two clients in parallel
        procs = []
        for i in range(len(paths)):
            procs.append(runner.spawn(iperf3_server_argv(5301 + i), host=server))
        time.sleep(1.0)
        outs = []
        for i, p in enumerate(paths):
            src = topo.path(p.name).client_addr
            argv = [*iperf3_client_argv(dst, 5301 + i, duration=seconds, bind=src), "-O", "1"]
            outs.append(runner.spawn(argv, host=client,
                                     stdout=workdir / f"both-{p.name}.json"))
        for o in outs:
            o.wait(seconds + 60)
            o.stop()
        for s in procs:
            s.stop()
        total = sum((parse_iperf3_json((workdir / f"both-{p.name}.json").read_text())
                     ["goodput_bps"] or 0) for p in paths) / 1e6
        rows.append({"path": "both", "rate_mbit": 15.0, "rtt_cfg_ms": float("nan"),
                     "rtt_ms": float("nan"), "tcp_mbit": total})
    return rows


def event_latency(runner: CommandRunner, workdir: Path, n: int) -> dict[str, Any]:
    """Table 3: how late schedule events are applied (t_applied - t_planned)."""
    base = LinkShape(bw_bps=10_000_000, delay_s=0.010)
    events = []
    for i in range(n):
        at = 0.5 + 0.25 * i
        kind = i % 4
        change = (LinkChange(bw_bps=5_000_000 if i % 8 else 10_000_000) if kind == 0 else
                  LinkChange(delay_s=0.02 if i % 8 == 1 else 0.01) if kind == 1 else
                  LinkChange(up=False) if kind == 2 else LinkChange(up=True))
        events.append(ScheduleEvent(at, "link", change))
    with Network(PairTopo(shape=base), runner=runner, workdir=workdir / "events") as net:
        net.prepare_schedule(events)  # as the runner does, before the time origin
        player = net.play(events, t0=time.time())
        player.join(events[-1].at_s + 30)
    lags = [1e3 * (a.t_applied - a.t_planned) for a in player.applied]
    errors = [a.error for a in player.applied if a.error]
    lags.sort()
    return {"events": len(lags), "errors": len(errors), "mean_ms": statistics.mean(lags),
            "p95_ms": lags[min(len(lags) - 1, int(0.95 * len(lags)))], "max_ms": lags[-1]}


def print_tables(links: list[dict], paths: list[dict], lat: dict | None) -> None:
    print("\nTable 1 - one shaped link (PairTopo), configured vs measured")
    print(f"{'rate':>9} {'delay':>6} | {'RTT cfg':>8} {'RTT meas':>9} {'ratio':>8} | "
          f"{'TCP Mbit/s':>10} {'of rate':>8}")
    for r in links:
        print(f"{r['rate_mbit']:>4} Mbit {r['delay_ms']:>3} ms | {r['rtt_cfg_ms']:>5} ms "
              f"{r['rtt_ms']:>6.2f} ms {pct(r['rtt_ms'], r['rtt_cfg_ms'])} | "
              f"{r['tcp_mbit']:>10.2f} {pct(r['tcp_mbit'], r['rate_mbit'])}")
    if paths:
        print("\nTable 2 - two-path multi-homed network (MultiHomedTopo)")
        print(f"{'path':>6} {'rate':>9} | {'RTT cfg':>8} {'RTT meas':>9} | "
              f"{'TCP Mbit/s':>10} {'of rate':>8}")
        for r in paths:
            print(f"{r['path']:>6} {r['rate_mbit']:>4g} Mbit | {r['rtt_cfg_ms']:>5.0f} ms "
                  f"{r['rtt_ms']:>6.2f} ms | {r['tcp_mbit']:>10.2f} "
                  f"{pct(r['tcp_mbit'], r['rate_mbit'])}")
    if lat:
        print("\nTable 3 - schedule events, t_applied - t_planned")
        print(f"events {lat['events']}, errors {lat['errors']}, mean {lat['mean_ms']:.1f} ms, "
              f"p95 {lat['p95_ms']:.1f} ms, max {lat['max_ms']:.1f} ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a subset (about 1 minute)")
    ap.add_argument("--seconds", type=float, default=None, help="iperf3 seconds per test")
    ap.add_argument("--no-multipath", action="store_true", help="skip table 2 (no OVS)")
    ap.add_argument("--offloads", action="store_true",
                    help="keep TSO/GSO/GRO on host interfaces (less CPU, coarser loss)")
    ap.add_argument("--json", type=Path, default=None, help="also write results here")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/testbed-fidelity"))
    args = ap.parse_args(argv)
    runner = CommandRunner()
    why = why_not_native(runner, need_ovs=not args.no_multipath)
    if why:
        print(f"fidelity: cannot run natively here ({why}); run it in the VM:\n  {VM_HINT}"
              + (" --quick" if args.quick else ""), file=sys.stderr)
        return 2
    seconds = args.seconds or (4.0 if args.quick else 6.0)
    combos = list(QUICK) if args.quick else [(r, d) for r in RATES_MBIT for d in DELAYS_MS]
    t0 = time.time()
    try:
        print("measuring one shaped link ...", flush=True)
        links = link_table(runner, args.workdir, combos, seconds, args.offloads)
        paths: list[dict] = []
        if not args.no_multipath:
            print("measuring the two-path network ...", flush=True)
            paths = multipath_table(runner, args.workdir, seconds)
        print("measuring schedule-event latency ...", flush=True)
        lat = event_latency(runner, args.workdir, 12 if args.quick else 40)
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        runner.stop_all()
    print_tables(links, paths, lat)
    print(f"\n({time.time() - t0:.0f} s; kernel {os.uname().release})")
    if args.json:
        args.json.write_text(json.dumps({"links": links, "paths": paths, "events": lat},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
