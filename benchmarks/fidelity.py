"""Link-emulation fidelity: configured vs measured rate and RTT, multi-path, event latency.

Prints three tables:

1. two hosts over one shaped link (`topologies.pair.PairTopo`): for 5/10/20/50 Mbit/s x
   1/10/50 ms one-way delay, the mean and the first ping RTT against 2 x delay, the
   iperf3 TCP goodput (receiver side, first second left out) against the rate, and the
   share of that transfer's segments that arrived after a segment sent later (from
   captures at both hosts, `analysis.order`).  One network is built and each
   configuration is set with ``tc qdisc change`` (as schedules do); neighbour caches are
   flushed before each, as a new run starts with them empty.  ``--before`` measures the
   same table first as the testbed ran before its fidelity fixes (no receive packet
   steering, no warm-up ping) and prints both side by side.
2. a two-path multi-homed network (10 Mbit/s 10 ms, 5 Mbit/s 40 ms): RTT and TCP per
   path (bound to the path's address), then both paths at once.
3. schedule-event latency: events played by `SchedulePlayer` on the pair network,
   ``t_applied - t_planned`` (mean / p95 / max) for rate, delay and down/up changes.

Needs root, sch_netem/sch_tbf and (for table 2) Open vSwitch.  Where the kernel lacks
them, run it inside the VM::

    .venv/bin/testbed vm -- .venv/bin/python benchmarks/fidelity.py [--quick]

``--quick`` measures a subset (10 Mbit/s x 10 ms, 5 Mbit/s x 50 ms, 20 Mbit/s x 1 ms).
Numbers from a software-emulated (TCG) VM understate what KVM or bare metal give.
A cell that could not be measured prints ``n/a`` and the reason is listed under the
tables; the benchmark then exits 1 (never a zero in place of a measurement).
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

from testbed.core.commands import CommandRunner
from testbed.core.errors import TestbedError
from testbed.host.traffic.iperf import (
    iperf3_client_argv,
    iperf3_server_argv,
    parse_iperf3_json,
)
from testbed.host.traffic.ping import parse_ping, ping_argv
from testbed.net.network import Network
from testbed.net.shaping import LinkShape
from testbed.spec.model import PathSpec, ScheduleEvent
from topologies.multipath import MultiHomedTopo
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


class Unmeasured(TestbedError):
    """A cell the benchmark could not measure; the table prints the reason."""


def tcp_test(runner: CommandRunner, client: Any, server: Any, addr: str, seconds: float,
             port: int, bind: str | None = None, tries: int = 3) -> dict[str, Any]:
    """One iperf3 TCP test: {"mbit": receiver-side goodput (first second omitted)}.

    A fresh one-off server on its own port for every test (a port reused at once can
    still be held by the previous server's last connection), the client started only
    once the server listens.  iperf3's own ``error`` and a report without receiver
    totals are failures: tried again (at most tries times), then `Unmeasured` with
    iperf3's reason -- never a zero.
    """
    errors = []
    for attempt in range(tries):
        p = port + 100 * attempt
        srv = runner.spawn(iperf3_server_argv(p), host=server)
        try:
            _wait_listening(runner, server, p)
            argv = [*iperf3_client_argv(addr, p, duration=seconds, bind=bind), "-O", "1"]
            res = runner.run(argv, host=client, timeout=seconds + 60, check=False)
            out = parse_iperf3_json(res.stdout)
            if out.get("error") or not out.get("goodput_bps"):
                errors.append(out.get("error") or f"no receiver totals (exit "
                              f"{res.returncode}): {res.stderr.strip()[-200:]}")
                continue
            return {"mbit": out["goodput_bps"] / 1e6, "tries": attempt + 1,
                    "retransmits": out.get("retransmits")}
        finally:
            srv.stop()
    raise Unmeasured(f"iperf3 to {addr} failed {tries} times: {errors[-1]}")


def _wait_listening(runner: CommandRunner, host: Any, port: int, timeout: float = 20.0
                    ) -> None:
    end = time.time() + timeout
    while time.time() < end:
        res = runner.run(["ss", "-Hltn", f"sport = :{port}"], host=host, check=False,
                         record=False)
        if res.stdout.strip():
            return
        time.sleep(0.1)
    raise Unmeasured(f"the iperf3 server on port {port} did not listen within {timeout:.0f} s")


def rtt_samples(runner: CommandRunner, host: Any, addr: str, count: int,
                bind: str | None = None) -> list[float]:
    """Each echo's RTT in ms, in order (a lost echo is left out)."""
    out = runner.run(ping_argv(addr, interval=0.05, count=count, bind=bind), host=host,
                     timeout=60, check=False).stdout
    return [r["rtt_ms"] for r in parse_ping(out) if r.get("rtt_ms") is not None]


def ooo_share(sender_pcap: Path, receiver_pcap: Path) -> tuple[int, int]:
    """(segments sent once, of them arrived after a segment sent later) of the largest
    TCP flow, from the sender's and the receiver's captures (`analysis.order`)."""
    from analysis.capture import CaptureAnalysis
    from analysis.order import flow_keys, late_arrivals

    keys = []
    flow_id = None
    for path in (sender_pcap, receiver_pcap):
        cap = CaptureAnalysis.of(path)
        rows = cap.flow_rows
        if flow_id is None:
            if not len(rows):
                raise Unmeasured(f"{path.name}: no TCP flow captured")
            flow_id = rows.loc[rows["bytes"].idxmax(), "flow_id"]
        match = rows.index[rows["flow_id"] == flow_id]
        if not len(match):
            raise Unmeasured(f"{path.name}: flow {flow_id} not captured")
        fi = int(match[0])
        keys.append(flow_keys(cap.segments, cap.table.cols["seq"], fi,
                              int(rows.loc[fi, "data_dir"])))
    return late_arrivals(keys[0], keys[1])


def pct(measured: float, configured: float) -> str:
    return f"{100 * measured / configured:6.1f} %"


def _cell(fn: Any) -> Any:
    """fn() or the reason it could not be measured (a string starting with 'n/a')."""
    try:
        return fn()
    except TestbedError as exc:
        return f"n/a: {exc}"


def link_table(runner: CommandRunner, workdir: Path, combos: list[tuple[int, int]],
               seconds: float, offloads: bool = False, rps: bool = True,
               warm: bool = True) -> list[dict[str, Any]]:
    """Table 1: the pair network through every (rate, delay) combination.

    rps: receive packet steering (the testbed's default; off = before the fix); warm:
    one ping before measuring (the runs' readiness step) -- without it each configuration
    starts with empty neighbour caches, as a fresh run did before the fix.
    """
    from testbed.host.capture import CaptureSet

    rows = []
    first = LinkShape(bw_bps=combos[0][0] * 10**6, delay_s=combos[0][1] / 1e3)
    with Network(PairTopo(shape=first), runner=runner, workdir=workdir / "pair",
                 offloads=offloads, rps=rps) as net:
        h1, h2 = net.host("h1"), net.host("h2")
        for i, (mbit, ms) in enumerate(combos):
            net.set_shape("link", LinkShape(bw_bps=mbit * 10**6, delay_s=ms / 1e3))
            for h in (h1, h2):
                runner.run(["ip", "neigh", "flush", "all"], host=h, check=False)
            if warm:
                rtt_samples(runner, h1, "10.0.0.2", count=1)
            rtts = rtt_samples(runner, h1, "10.0.0.2", count=20)
            pdir = workdir / f"pcap-{'on' if rps else 'off'}-{i}"
            caps = CaptureSet(runner, pdir, pdir, 128)
            sent, got = caps.add(h1, "h1-eth0").path, caps.add(h2, "h2-eth0").path
            caps.start()
            try:
                tcp = _cell(lambda i=i: tcp_test(runner, h1, h2, "10.0.0.2", seconds,
                                                 port=5201 + i))
            finally:
                caps.stop()
            ooo = _cell(lambda a=sent, b=got: ooo_share(a, b))
            row = {"rate_mbit": mbit, "delay_ms": ms, "rtt_cfg_ms": 2 * ms,
                   "rtt_ms": statistics.mean(rtts) if rtts else "n/a: no echo answered",
                   "rtt_min_ms": min(rtts) if rtts else "n/a: no echo answered",
                   "first_rtt_ms": rtts[0] if rtts else "n/a: no echo answered",
                   "tcp_mbit": tcp["mbit"] if isinstance(tcp, dict) else tcp,
                   "tcp_tries": tcp["tries"] if isinstance(tcp, dict) else None,
                   "ooo_pct": 100 * ooo[1] / ooo[0] if isinstance(ooo, tuple) and ooo[0]
                   else (ooo if isinstance(ooo, str) else "n/a: no segment sent once")}
            rows.append(row)
            print("  " + " ".join(f"{k}={_fmt(v)}" for k, v in row.items()), flush=True)
    return rows


def _fmt(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def multipath_table(runner: CommandRunner, workdir: Path, seconds: float, rps: bool = True
                    ) -> list[dict[str, Any]]:
    """Table 2: RTT and TCP per path of a 2-path network, then both at once."""
    paths = [PathSpec(name="wifi", bw=10_000_000, delay=0.010, queue=100),
             PathSpec(name="cell", bw=5_000_000, delay=0.040, queue=100)]
    topo = MultiHomedTopo(paths=paths)
    rows: list[dict[str, Any]] = []
    with Network(topo, runner=runner, workdir=workdir / "multipath", rps=rps) as net:
        client, server = net.host("client"), net.host("server")
        dst = topo.server_addr()
        for i, p in enumerate(paths):
            src = topo.path(p.name).client_addr
            rtts = rtt_samples(runner, client, dst, count=20, bind=src)
            tcp = _cell(lambda src=src, i=i: tcp_test(runner, client, server, dst, seconds,
                                                     port=5301 + i, bind=src))
            rows.append({"path": p.name, "rate_mbit": p.shape.bw_bps / 1e6,
                         "rtt_cfg_ms": p.shape.rtt_s() * 1e3,
                         "rtt_ms": statistics.mean(rtts) if rtts else "n/a: no echo answered",
                         "tcp_mbit": tcp["mbit"] if isinstance(tcp, dict) else tcp,
                         "tcp_tries": tcp["tries"] if isinstance(tcp, dict) else None})
        # both paths at once: two servers, two clients in parallel
        procs = [runner.spawn(iperf3_server_argv(5401 + i), host=server)
                 for i in range(len(paths))]
        for i in range(len(paths)):
            _wait_listening(runner, server, 5401 + i)
        outs = []
        for i, p in enumerate(paths):
            src = topo.path(p.name).client_addr
            argv = [*iperf3_client_argv(dst, 5401 + i, duration=seconds, bind=src), "-O", "1"]
            outs.append(runner.spawn(argv, host=client,
                                     stdout=workdir / f"both-{p.name}.json"))
        for o in outs:
            o.wait(seconds + 60)
            o.stop()
        for srv in procs:
            srv.stop()
        reports = [parse_iperf3_json((workdir / f"both-{p.name}.json").read_text())
                   for p in paths]
        bad = [r.get("error") or "no receiver totals" for r in reports
               if r.get("error") or not r.get("goodput_bps")]
        rows.append({"path": "both", "rate_mbit": 15.0, "rtt_cfg_ms": None, "rtt_ms": None,
                     "tcp_mbit": f"n/a: {bad[0]}" if bad else
                     sum(r["goodput_bps"] for r in reports) / 1e6})
    return rows


def event_latency(runner: CommandRunner, workdir: Path, n: int) -> dict[str, Any]:
    """Table 3: how late schedule events are applied (t_applied - t_planned)."""
    base = LinkShape(bw_bps=10_000_000, delay_s=0.010)
    events = []
    for i in range(n):
        at = 0.5 + 0.25 * i
        kind = i % 4
        change = ({"bw": 5_000_000 if i % 8 else 10_000_000} if kind == 0 else
                  {"delay": 0.02 if i % 8 == 1 else 0.01} if kind == 1 else
                  {"down": kind == 2})
        events.append(ScheduleEvent(at=at, link="link", **change))
    with Network(PairTopo(shape=base), runner=runner, workdir=workdir / "events") as net:
        net.prepare_schedule(events)  # as the runner does, before the time origin
        player = net.play(events, t0=time.time())
        player.join(events[-1].at + 30)
    lags = sorted(1e3 * (a.t_applied - a.t_planned) for a in player.applied
                  if not a.error)
    errors = [a.error for a in player.applied if a.error]
    row: dict[str, Any] = {"events": len(player.applied), "errors": len(errors),
                           "planned": n}
    if not lags:
        why = f"n/a: no event applied ({errors[0] if errors else 'none played'})"
        return {**row, "mean_ms": why, "p95_ms": why, "max_ms": why}
    return {**row, "mean_ms": statistics.mean(lags),
            "p95_ms": lags[min(len(lags) - 1, int(0.95 * len(lags)))], "max_ms": lags[-1],
            **({"error": f"n/a: {len(errors)} of {n} events failed: {errors[0]}"}
               if errors else {}),
            **({"missing": f"n/a: {n - len(player.applied)} of {n} events not played"}
               if len(player.applied) < n else {})}


def unmeasured(rows: list[dict[str, Any]]) -> list[str]:
    """Every cell that says why it could not be measured."""
    return [f"{k}: {v}" for r in rows for k, v in r.items()
            if isinstance(v, str) and v.startswith("n/a")]


def as_json(row: dict[str, Any]) -> dict[str, Any]:
    """row for --json: an unmeasured cell is null, and its reason is in ``unmeasured``."""
    why = {k: v for k, v in row.items() if isinstance(v, str) and v.startswith("n/a")}
    return {**{k: (None if k in why else v) for k, v in row.items()},
            "unmeasured": {k: v.removeprefix("n/a: ") for k, v in why.items()}}


def _num(v: Any, fmt: str = "{:.2f}") -> str:
    return fmt.format(v) if isinstance(v, (int, float)) else "n/a"


def print_link_table(before: list[dict] | None, after: list[dict]) -> None:
    print("\nTable 1 - one shaped link (PairTopo): configured vs measured, "
          + ("before (no RPS, cold neighbour caches) / after (the testbed's default)"
             if before else "the testbed's default"))
    cols = ("TCP Mbit/s", "of rate", "RTT ms", "first RTT ms", "out of order %")
    print(f"{'rate':>9} {'delay':>6} {'RTT cfg':>8} | " + " | ".join(f"{c:>19}" for c in cols))
    for i, a in enumerate(after):
        b = before[i] if before else None

        def pair(key: str, fmt: str = "{:.2f}", b=b, a=a) -> str:
            return (f"{_num(b[key], fmt):>9} {_num(a[key], fmt):>9}" if b
                    else f"{_num(a[key], fmt):>19}")

        def share(row: dict) -> str:
            v = row["tcp_mbit"]
            return f"{100 * v / row['rate_mbit']:.1f}" if isinstance(v, float) else "n/a"
        ratio = (f"{share(b):>9} {share(a):>9}" if b else f"{share(a):>19}")
        print(f"{a['rate_mbit']:>4} Mbit {a['delay_ms']:>3} ms {a['rtt_cfg_ms']:>5} ms | "
              f"{pair('tcp_mbit')} | {ratio} | {pair('rtt_ms')} | {pair('first_rtt_ms')} | "
              f"{pair('ooo_pct', '{:.3f}')}")


def print_tables(before: list[dict] | None, links: list[dict], paths: list[dict],
                 lat: dict | None) -> None:
    print_link_table(before, links)
    if paths:
        print("\nTable 2 - two-path multi-homed network (MultiHomedTopo)")
        print(f"{'path':>6} {'rate':>9} | {'RTT cfg':>8} {'RTT meas':>9} | "
              f"{'TCP Mbit/s':>10} {'of rate':>8}")
        for r in paths:
            cfg = f"{r['rtt_cfg_ms']:.0f} ms" if r["rtt_cfg_ms"] else "-"
            tcp = r["tcp_mbit"]
            share = pct(tcp, r["rate_mbit"]) if isinstance(tcp, float) else "n/a"
            rtt = "-" if r["rtt_ms"] is None else _num(r["rtt_ms"])
            print(f"{r['path']:>6} {r['rate_mbit']:>4g} Mbit | {cfg:>8} "
                  f"{rtt:>6} ms | {_num(tcp):>10} {share:>8}")
    if lat:
        print("\nTable 3 - schedule events, t_applied - t_planned")
        print(f"events {lat['events']} of {lat['planned']}, errors {lat['errors']}, mean "
              f"{_num(lat['mean_ms'], '{:.1f}')} ms, p95 {_num(lat['p95_ms'], '{:.1f}')} ms, "
              f"max {_num(lat['max_ms'], '{:.1f}')} ms")
    tries = [r["tcp_tries"] for r in (before or []) + links + paths
             if isinstance(r.get("tcp_tries"), int)]
    print(f"\niperf3 TCP tests: {len(tries)} measured, {sum(t > 1 for t in tries)} needed "
          f"more than one try ({sum(tries) - len(tries)} retries)")
    missing = unmeasured((before or []) + links + paths + ([lat] if lat else []))
    if missing:
        print("\nnot measured:")
        for m in missing:
            print(f"  {m}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a subset (about 1 minute)")
    ap.add_argument("--seconds", type=float, default=None, help="iperf3 seconds per test")
    ap.add_argument("--no-multipath", action="store_true", help="skip table 2 (no OVS)")
    ap.add_argument("--offloads", action="store_true",
                    help="keep TSO/GSO/GRO on host interfaces (less CPU, coarser loss)")
    ap.add_argument("--before", action="store_true",
                    help="also measure table 1 as the testbed ran before its fidelity "
                         "fixes (no receive packet steering, cold neighbour caches)")
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
    before = None
    try:
        if args.before:
            print("measuring one shaped link, as before the fidelity fixes ...", flush=True)
            before = link_table(runner, args.workdir / "before", combos, seconds,
                                args.offloads, rps=False, warm=False)
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
    print_tables(before, links, paths, lat)
    print(f"\n({time.time() - t0:.0f} s; kernel {os.uname().release}, "
          f"{os.cpu_count()} CPUs)")
    if args.json:
        args.json.write_text(json.dumps({"before": before and [as_json(r) for r in before],
                                         "links": [as_json(r) for r in links],
                                         "paths": [as_json(r) for r in paths],
                                         "events": as_json(lat)}, indent=1))
    missing = unmeasured((before or []) + links + paths + [lat])
    if missing:
        print(f"fidelity: {len(missing)} cell(s) could not be measured (see above)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
