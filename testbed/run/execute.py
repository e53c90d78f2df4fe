"""One run, end to end: `execute_run(run, bundle, meta, phase)`.

Order (every step through one `CommandRunner`, whose transcript goes into the bundle)::

    preflight   host facts (kernel, versions, git), the plan (`testbed.plan.netplan`:
                names checked against the topology), congestion controls loaded
    set-up      Network (+ controller) up, transport on every host, flow tools starting
                (Python is slow to start under emulation, so they start first and are
                waited for last), captures listening, samplers running, flow-tool
                servers listening and clients ready, CPUs quiet
    traffic     t0 = the moment all that is so; flows, pings and schedule events run
                at t0 + their offsets on the time.time() clock; the run lasts `duration`
                (or until every finite workload is done, with ``stop_when_done``)
    teardown    workloads and samplers stopped, then captures (tc/OVS/sysctl dumps taken
                meanwhile); Network down or kept
    analysis    `analysis.bundle.analyze_bundle` fills metrics/ and gives the headline
                (or, with analyze=False, later on the host:
                `testbed.run.sweep.finish_deferred`)

What the run does is computed before anything starts, in one `NetworkPlan`; this module
only carries it out.  ``testbed run --dry-run`` lists the commands (`testbed.run.dryrun`).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.core.commands import CommandRunner, in_parallel
from testbed.core.errors import RunError, TestbedError
from testbed.core.recording import recording
from testbed.core.safefiles import atomic_write_text
from testbed.host.coupled.loader import CoupledControls
from testbed.plan.flows import flow_sender_hosts, workload_seeds
from testbed.plan.netplan import NetworkPlan, plan_network
from testbed.results.bundle import DEFERRED, Bundle
from testbed.run.diskspace import DiskWatch, capture_estimate, check_free
from testbed.run.fidelity_data import dp_lost, fidelity_extra, qdisc_drops
from testbed.run.preflight import bpf_ccs, ensure_ccs
from testbed.run.provenance import host_facts, node_dumps
from testbed.run.reuse import NetworkKeeper
from testbed.spec.experiment import Experiment
from testbed.spec.sweep import RunPlan

if TYPE_CHECKING:
    from mininet.topo import Topo

    from controllers.launcher import ControllerProcess
    from testbed.host.traffic.flows import FlowRun
    from testbed.host.traffic.ping import PingRun
    from testbed.net.network import Network
    from testbed.plan.transport import TransportSettings

Phase = Callable[[str], None]
POLL_S = 0.1
CONTROLLER_PORT = 6653


def make_controller(exp: Experiment, topo: Topo, bundle: Bundle,
                    runner: CommandRunner | None = None) -> ControllerProcess | None:
    """The controller hook for `Network` (fat-tree), or None.

    exp: the spec; topo: its topology; bundle: where the controller logs go; runner: the
    run's command runner (so the controller's commands land in the transcript).
    """
    kind = exp.controller_kind()
    if kind == "none":
        return None
    from controllers.launcher import ControllerProcess
    from controllers.registry import canonical_app

    return ControllerProcess(canonical_app(kind), topo, CONTROLLER_PORT,
                             bundle.logs_dir / "controller.log", runner=runner)


class _Timeline:
    """Phase timings (seconds) for metadata.json."""

    def __init__(self, phase: Phase):
        self.phase = phase
        self.times: dict[str, float] = {}
        self._name: str | None = None
        self._t = time.time()

    def enter(self, name: str) -> None:
        now = time.time()
        if self._name is not None:
            self.times[self._name] = round(self.times.get(self._name, 0.0) + now - self._t, 3)
        self._name, self._t = name, now
        if name != "done":
            self.phase(name)


def analyze_run(run_dir: Path) -> dict[str, Any]:
    """Compute a finished run's ``metrics/``; return its headline metrics and, under
    ``fidelity``, its fidelity verdict (`analysis.fidelity`; JSON-safe)."""
    import pandas as pd

    from analysis.bundle import analyze_bundle, load_metadata
    from analysis.fidelity import assess

    headline = analyze_bundle(run_dir)
    metrics = Path(run_dir) / "metrics"

    def table(name: str) -> pd.DataFrame | None:
        path = metrics / f"{name}.parquet"
        return pd.read_parquet(path) if path.is_file() else None

    fid = assess(load_metadata(Path(run_dir)), table("flows"), table("ping"), table("events"))
    return _finite({**headline, "fidelity": fid})


def _finite(value: Any) -> Any:
    """value with every non-finite float (in nested dicts too) as None (JSON has none)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def execute_run(run: RunPlan, bundle: Bundle, meta: dict[str, Any], phase: Phase,
                keeper: NetworkKeeper | None = None, analyze: bool = True,
                runner: CommandRunner | None = None) -> dict[str, Any]:
    """Run one plan into bundle; fill meta; return the headline metrics.

    run: one run of a sweep; bundle: its (created) folder; meta: the run's metadata
    (written by the caller); phase: called with the name of each phase; keeper: a
    `NetworkKeeper` that may hand over the previous run's network and keep this one's
    for the next run (None: the run builds and stops its own); analyze: False leaves the
    analysis to `testbed.run.sweep.finish_deferred` later (inside the testbed VM,
    whose software emulation makes it ~10x slower than on the host) and returns no
    headline; runner: the run's `CommandRunner` (a
    `testbed.core.recording.RecordingRunner` for a dry run, `testbed.run.dryrun`: then
    nothing is executed, waited for or judged).  Everything else started here is stopped
    before this returns or raises.
    """

    runner = runner or CommandRunner()
    tl = _Timeline(phase)
    meta["timing"] = tl.times
    try:
        tl.enter("preflight")
        meta.update(host_facts())
        plan = plan_network(run)
        ensure_ccs(runner, plan.spec)
        if not recording(runner):  # before anything is built or captured
            need = capture_estimate(plan)
            meta["disk"] = {"capture_estimate_bytes": need,
                            "free_bytes": check_free(bundle.root, need)}
        meta["workload_seeds"] = workload_seeds(plan.spec, plan.seed)
        meta["flows_planned"] = len(plan.flows)
        with CoupledControls(runner, [] if recording(runner) else bpf_ccs(plan.spec),
                             bundle.samples_dir) as coupled:
            meta["coupled_cc"] = dict(coupled.ids)  # every BPF control (hand-over too)
            _run_network(plan, bundle, meta, runner, tl, keeper)
    finally:
        runner.stop_all()
        atomic_write_text(bundle.transcript_path, runner.transcript.to_jsonl())
        atomic_write_text(bundle.root / "commands.sh", runner.transcript.as_shell())
        tl.enter("done")
    if recording(runner):
        return {}  # a dry run: nothing ran, so there is nothing to judge or analyse
    problems = _problems(plan, bundle, meta)
    if problems:
        meta["problems"] = problems
        raise RunError("; ".join(problems))
    if not analyze:
        meta["analysis"] = DEFERRED
        return {}
    bundle.write_metadata(meta)  # analysis reads interfaces and t0 from it
    tl.enter("analysis")
    headline = analyze_run(bundle.root)
    tl.enter("done")
    return headline


def _neighbour_settings(runner: CommandRunner, net: Network, hosts: list[str],
                        ts: TransportSettings) -> dict[str, dict[str, int]]:
    """Write `neighbour_sysctls` in every namespace of the network that is not one of
    the hosts (their transport settings carry it); returns what was written, by node."""
    from testbed.host.mptcp import neighbour_sysctls

    values = neighbour_sysctls(ts.keep_neighbours)
    others = [n for n in net.namespaces() if n not in hosts]
    if not values or not others:
        return {}

    def write(name: str) -> None:
        runner.run(["sysctl", "-q", "-w", *(f"{k}={v}" for k, v in values.items())],
                   host=net.node(name))
    in_parallel(write, others)
    return {n: dict(values) for n in others}


def _in_background(fn: Callable[[], Any]) -> Future[Any]:
    """fn started on a thread of its own; its `Future` gives what it returned or raised."""
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(fn)
    finally:
        pool.shutdown(wait=False)  # the submitted call still runs to its end


def _handover_notifier(plan: NetworkPlan, net: Any, runner: CommandRunner,
                       bundle: Bundle) -> Any:
    """The started `HandoverNotifier` of a run with a hand-over scheme (else None)."""
    exp = plan.spec
    if exp.transport.handover == "none" or recording(runner):
        return None
    from testbed.host.coupled.loader import map_ids
    from testbed.host.handover.notifier import HandoverNotifier

    senders = [net.host(h) for h in flow_sender_hosts(plan.flows)]
    return HandoverNotifier(runner, senders, map_ids(runner, exp.transport.kernel_cc()),
                            bundle.samples_dir).start()


def _handover_done(handover: Any, net: Any, runner: CommandRunner) -> dict[str, Any]:
    """What metadata keeps of the notifications; and forget the path MTUs the restart
    ICMPs lowered, so that a later run on this network starts with full-size segments
    (``net.ipv4.route.flush`` drops the namespace's cached route exceptions)."""
    in_parallel(lambda host: runner.run(["ip", "route", "flush", "cache"], host=host,
                                        check=False), list(handover.hosts))
    notes = [r for r in handover.records if "sockets" in r]
    return {"notifications": len(notes),
            "sockets_signalled": sum(len(r["sockets"]) for r in notes),
            "undone_resent": sum("undone" in r for r in handover.records),
            "errors": [e for r in handover.records for e in r["errors"].values()]}


def _problems(plan: NetworkPlan, bundle: Bundle, meta: dict[str, Any]) -> list[str]:
    """What makes this finished run ``failed`` (`testbed.run.outcome`)."""
    from testbed.run.outcome import run_problems

    log = bundle.samples_dir / "events.jsonl"
    applied = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] \
        if log.is_file() else []
    return run_problems(meta, [ev.at for ev in plan.events], applied)


def _run_network(plan: NetworkPlan, bundle: Bundle, meta: dict[str, Any],
                 runner: CommandRunner, tl: _Timeline, keeper: NetworkKeeper | None = None
                 ) -> None:
    """Set-up, traffic and teardown of one run on its network (see the module docstring)."""
    from testbed.host.capture import CaptureSet
    from testbed.host.mptcp import configure_host, host_interfaces
    from testbed.host.sampler import Sampler
    from testbed.host.traffic.flows import FlowRun
    from testbed.host.traffic.ping import PingRun
    from testbed.net.monitor import Monitor, with_queue_drops
    from testbed.run.readiness import wait_quiet, warm_targets, warm_up

    exp, topo, hosts, flows = plan.spec, plan.topo, list(plan.hosts), list(plan.flows)
    tl.enter("set-up")
    controller = make_controller(exp, topo, bundle, runner)
    workdir = bundle.logs_dir / "network"
    keeper = keeper or NetworkKeeper(keep=False)
    net, meta["network"] = keeper.acquire(exp, topo, plan.run_id, runner, controller, workdir)
    ok = False
    flow_run: FlowRun | None = None
    try:
        meta["interfaces"] = net.interface_map()
        meta["links"] = net.describe()
        peer_mh = bool(getattr(topo, "server_multihomed", False))
        # the flow tools first, without waiting: Python takes seconds to start under
        # emulation, which the steps below overlap; a server opens its socket at
        # `listen`, once its host is configured, and a client waits for `release`
        if flows:
            flow_run = FlowRun(runner, {h: net.host(h) for h in hosts}, flows,
                               bundle.samples_dir, bundle.logs_dir)
            flow_run.spawn(listen_later=True)

        def configure(h: str) -> dict[str, Any]:
            host = net.host(h)
            return configure_host(runner, host, plan.transport, host_interfaces(host),
                                  role=plan.roles[h], peer_multihomed=peer_mh)

        # each host is its own namespace: a few at a time (a fat-tree has 16)
        meta["transport"] = dict(zip(hosts, in_parallel(configure, hosts), strict=True))
        if flow_run is not None:
            flow_run.listen()
        # routers lose the carrier of a link taken down as the hosts do: they keep or
        # forget their neighbours as the hosts do (else the first packet after an
        # outage waits for the router's ARP, a round trip of the new path)
        meta["neighbours"] = _neighbour_settings(runner, net, hosts, plan.transport)
        # ready before the clock starts: neighbours and switch flows warm (`readiness`)
        meta["readiness"] = warm_up(runner, net, warm_targets(
            flows, plan.pings, plan.path_addrs, plan.addr_of.get("server")))
        captures = CaptureSet(runner, bundle.pcap_dir, bundle.logs_dir, exp.capture.snaplen)
        for h, intf in plan.captures:
            captures.add(net.host(h), intf)
        samplers: list[Sampler] = []
        ping_runs: list[tuple[float, PingRun]] = []
        handover = _handover_notifier(plan, net, runner, bundle)
        monitor: Monitor | None = None
        lost_before: int | None = None
        drops_before: dict[str, int] | None = None
        traffic_over = False
        try:
            captures.spawn()  # tcpdump starts while the samplers and counters do
            if exp.sampler.enabled:
                for h in exp.sampler.hosts or flow_sender_hosts(flows):
                    s = Sampler(runner, net.host(h), bundle.samples_dir,
                                interval=exp.sampler.interval)
                    s.start()
                    samplers.append(s)
            net.prepare_schedule(plan.events)  # slow under emulation: before t0 is fixed
            lost_before = dp_lost(runner, net)  # no packets from here to t0
            drops_before = qdisc_drops(runner)
            captures.wait_ready()
            if flow_run is not None:
                flow_run.wait_ready()     # servers listening, clients waiting for t0
            if not recording(runner):
                meta["readiness"].update(wait_quiet())  # ... and so is everything above
            monitor = Monitor(net.monitor_links()).start()
            if flow_run is not None:
                flow_run.release()
                t0 = float(flow_run.t0)
            else:
                t0 = time.time()
            meta["t0"] = t0
            tl.enter("traffic")
            net.play(plan.events, t0, bundle.samples_dir / "events.jsonl",
                     after=handover.notify if handover is not None else None)
            ping_runs = [(p.start, PingRun(
                runner, net.host(p.host), p.dst_addr, bundle.samples_dir,
                name=p.name, src=p.src, dst=p.dst, path=p.path,
                interval=p.interval, count=p.count, duration=p.duration,
                size=p.size, bind=p.bind)) for p in plan.pings]
            disk = DiskWatch(bundle.pcap_dir)
            meta["ended_early"] = _traffic(exp, net, t0, flow_run, ping_runs,
                                           wait=not recording(runner), disk=disk)
            if disk.stopped:
                meta["disk_full"] = disk.stopped
            meta["t_traffic_end"] = time.time()
            tl.enter("teardown")
            traffic_over = True
        finally:
            raw = monitor.stop(plan.events, meta.get("t0")) if monitor is not None else None
            if raw is not None:
                meta["fidelity_raw"] = raw  # completed by `counters` below

            def counters() -> None:  # what the monitor reads once more after the traffic
                if raw is None:
                    return
                try:  # never in the way of stopping flows and captures
                    raw["links"] = with_queue_drops(raw["links"], drops_before,
                                                    qdisc_drops(runner))
                    raw.update(fidelity_extra(runner, net, plan, lost_before))
                except (TestbedError, OSError) as exc:
                    raw.setdefault("errors", []).append(f"after the traffic: {exc}")

            # side by side: each of these waits a second or more for its processes under
            # emulation; the captures stop last, once the flows have closed
            stopping: list[Callable[[], Any]] = [counters, *(s.stop for s in samplers)]
            if flow_run is not None:
                stopping.append(flow_run.stop)  # clients, then servers
            stopping += [pr.stop for _start, pr in ping_runs if pr.proc is not None]
            dumped: Future[dict[str, Any]] | None = None
            try:
                results = in_parallel(lambda stop: stop(), stopping, workers=len(stopping))
            except BaseException:
                traffic_over = False
                raise
            finally:
                if traffic_over:  # every workload has stopped: the dumps (sysctls, qdisc
                    # and OpenFlow counters) read nothing that stopping tcpdump changes
                    dumped = _in_background(lambda: node_dumps(
                        runner, net, hosts, bundle.logs_dir, openflow=controller is not None))
                try:
                    meta["captures"] = captures.stop()
                finally:
                    if dumped is not None:
                        wait_futures([dumped])
                if handover is not None:
                    handover.close()
                    meta["handover"] = _handover_done(handover, net, runner)
            meta["samplers"] = results[1:1 + len(samplers)]
            if flow_run is not None:
                meta["flows"] = _flow_summary(flow_run.collect())
            for _start, pr in ping_runs:
                if pr.proc is not None:
                    pr.collect()
        if dumped is not None:
            meta.update(dumped.result())
        if controller is not None:
            meta["controller"] = {"kind": exp.controller_kind(), **controller.describe()}
        ok = True
    finally:
        if not ok and flow_run is not None and not flow_run.stopped:
            with contextlib.suppress(Exception):  # set-up failed: the reason is raised
                flow_run.stop()
        meta["network_cleanup"] = keeper.release(net, ok)


def _traffic(exp: Experiment, net: Network, t0: float, flow_run: FlowRun | None,
             ping_runs: list[tuple[float, PingRun]], wait: bool = True,
             disk: DiskWatch | None = None) -> bool:
    """Wait out the run, starting pings on time; True when it ended early (all done, or
    the disk nearly full: then ``disk.stopped`` says why).

    wait: False in a dry run: the pings start at once, in their order, and nothing is
    waited for; disk: watches the free space under the bundle."""
    end = t0 + exp.duration
    pending = sorted(ping_runs, key=lambda p: p[0])
    if not wait:
        for _start, ping in pending:
            ping.start()
        return False
    finite_flows = flow_run is not None and all(
        f.size_bytes is not None or f.duration_s is not None for f in flow_run.flows)
    while True:
        now = time.time()
        while pending and t0 + pending[0][0] <= now:
            pending.pop(0)[1].start()
        if now >= end:
            return False
        if disk is not None and disk.low(now):
            return True
        net.check()
        if exp.stop_when_done and flow_run is not None and finite_flows \
                and flow_run.wait(timeout=0):
            return True
        nxt = min([end] + [t0 + s for s, _ in pending])
        time.sleep(max(0.0, min(POLL_S, nxt - time.time())))


def _flow_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """How many flows ran and failed, and (up to five) distinct errors."""
    errors = [r for r in records if r.get("error")]
    return {"count": len(records), "failed": len(errors),
            "errors": sorted({str(r["error"]) for r in errors})[:5]}
