"""One run, end to end: `execute_run(plan, bundle, meta, phase)`.

Order (every step through one `CommandRunner`, whose transcript goes into the bundle)::

    preflight   host facts (kernel, versions, git), congestion controls loaded, names checked
    set-up      Network (+ controller) up, transport on every host, captures listening,
                samplers running, flow-tool servers listening
    traffic     t0 = the moment the servers listen; flows, pings and schedule events run
                at t0 + their offsets on the time.time() clock; the run lasts `duration`
                (or until every finite workload is done, with ``stop_when_done``)
    teardown    workloads, samplers and captures stopped; tc/OVS/sysctl dumps; Network down
    analysis    `analysis.bundle.analyze_bundle` fills metrics/ and gives the headline
                (or, with analyze=False, later on the host: `results.finish_deferred`)

The pure parts -- the topology object, flow lists, schedule events, transport settings
-- are separate functions, shared with `dry_run_commands` (``testbed run --dry-run``),
which feeds the same command builders to a dry-run `CommandRunner` without root.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.core.commands import CommandRunner, in_parallel
from testbed.core.errors import RunError, SpecError, TestbedError
from testbed.core.safefiles import atomic_write_text
from testbed.net.hoststate import SYSCTL_PATTERN, parse_sysctl, sysctl_keys
from testbed.results.bundle import DEFERRED, Bundle
from testbed.spec.model import (
    BulkWorkload,
    CbrWorkload,
    CustomTopology,
    Experiment,
    FatTreeTopology,
    FlowsWorkload,
    MultipathTopology,
    PingWorkload,
    format_duration_exact,
)
from testbed.spec.sweep import workload_seed

Phase = Callable[[str], None]
POLL_S = 0.1
CONTROLLER_PORT = 6653


# ---------------------------------------------------------------------------------------
# pure: from the spec to the pieces' inputs


def build_topology(exp: Experiment) -> Any:
    """The Mininet `Topo` for the spec (pure; no root needed).

    exp: the resolved spec.
    """
    topo = exp.topology
    if isinstance(topo, MultipathTopology):
        from testbed.net.shaping import LinkShape
        from topologies.multipath import MultiHomedTopo
        from topologies.multipath import PathSpec as TopoPath

        paths = [TopoPath(p.name, LinkShape(
            bw_bps=p.bw, delay_s=p.delay, jitter_s=p.jitter, loss_pct=p.loss,
            **({"queue_pkts": p.queue} if p.queue is not None else {}))) for p in topo.paths]
        return MultiHomedTopo(paths=paths, server_multihomed=topo.server_multihomed)
    if isinstance(topo, FatTreeTopology):
        from topologies.fattree import FatTreeTopo

        return FatTreeTopo(
            k=topo.k, bw=None if topo.bw is None else topo.bw / 1e6,
            delay=format_duration_exact(topo.delay) if topo.delay else None,
            loss=topo.loss or None, max_queue_size=topo.queue)
    klass = custom_topology_class(topo.kind)
    try:
        return klass(**topo.params)
    except TypeError as exc:
        raise SpecError(f"topology.params: {topo.kind} does not accept them ({exc})") from None


def custom_topology_class(kind: str) -> type:
    """The class named by ``topology.kind = "package.module:Class"``, checked to be a
    subclass of Mininet's ``Topo`` before anything of it is called.

    Importing the module runs its code (as root, in a real run): a custom topology module
    is trusted code (docs/security.md).  Anything but a ``Topo`` subclass -- a function
    such as ``subprocess:getoutput``, an instance, a module -- raises `SpecError`.
    """
    from mininet.topo import Topo

    module, _, name = kind.partition(":")
    try:
        klass = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise SpecError(f"topology.kind: cannot load {kind!r} ({exc}); give "
                        "'package.module:Class' importable from the project") from None
    if not (inspect.isclass(klass) and issubclass(klass, Topo)):
        raise SpecError(f"topology.kind: {kind!r} is not a Mininet Topo subclass; give a "
                        "class derived from mininet.topo.Topo") from None
    return klass


def topo_hosts(exp: Experiment, topo: Any) -> list[str]:
    """The hosts workloads may use: the spec's names, or every host of a custom class."""
    names = exp.topology.host_names()
    return list(names) if names is not None else sorted(topo.hosts())


def check_against_topology(exp: Experiment, topo: Any) -> None:
    """Names the spec uses that the built topology lacks -> `SpecError` naming the key.

    exp: the spec; topo: `build_topology(exp)`.
    """
    from testbed.net.links import link_groups

    hosts = set(topo.hosts())
    for i, wl in enumerate(exp.workload):
        for key in ("src", "dst", "hosts"):
            value = getattr(wl, key, None)
            for name in value if isinstance(value, list) else [value]:
                if name is not None and name not in hosts:
                    raise SpecError(f"workload[{i}].{key}: no host named {name!r} in "
                                    f"{exp.topology.kind}")
    links = link_groups(topo)
    for i, ev in enumerate(exp.schedule):
        if ev.link not in links:
            known = ", ".join(sorted(links)[:8]) or "none (no shaped links)"
            raise SpecError(f"schedule[{i}].link: no shaped link named {ev.link!r}; links "
                            f"are {known}{' ...' if len(links) > 8 else ''}")


def schedule_events(exp: Experiment) -> list[Any]:
    """The spec's ``[[schedule]]`` as `testbed.net.schedule.ScheduleEvent` s."""
    from testbed.net.schedule import LinkChange, ScheduleEvent

    out = []
    for ev in exp.schedule:
        out.append(ScheduleEvent(ev.at, ev.link, LinkChange(
            bw_bps=ev.bw, delay_s=ev.delay, jitter_s=ev.jitter, loss_pct=ev.loss,
            up=None if ev.down is None else not ev.down)))
    return sorted(out, key=lambda e: e.at_s)


def uses_mptcp(exp: Experiment) -> bool:
    """Whether any workload's connections are MPTCP."""
    for wl in exp.workload:
        proto = getattr(wl, "protocol", None)
        if isinstance(wl, (BulkWorkload, FlowsWorkload)) and \
                (proto or exp.transport.protocol) == "mptcp":
            return True
    return False


def transport_settings(exp: Experiment) -> Any:
    """`testbed.host.mptcp.TransportSettings` for the hosts: MPTCP if any workload needs it."""
    from testbed.host.mptcp import TransportSettings

    t = exp.transport
    return TransportSettings(protocol="mptcp" if uses_mptcp(exp) else "tcp", cc=t.cc,
                             rmem=t.rmem, wmem=t.wmem, subflows=t.subflows,
                             subflows_per_path=t.subflows_per_path, scheduler=t.scheduler,
                             sysctl=dict(t.sysctl))


def plan_flows(exp: Experiment, run_seed: int, hosts: list[str]) -> list[Any]:
    """Every flow of the run (bulk, flows, cbr) as `FlowSpec` s with host names only.

    exp: the spec; run_seed: the repetition's seed (random patterns derive theirs from
    it); hosts: the host pool for patterns without an explicit one.
    """
    from testbed.host.traffic import patterns as pt

    flows: list[Any] = []
    for i, wl in enumerate(exp.workload):
        name = exp.workload_name(i)
        if isinstance(wl, BulkWorkload):
            flows += pt.one_to_one(name, wl.src, wl.dst,
                                   protocol=wl.protocol or exp.transport.protocol,
                                   size=wl.size, duration=wl.duration, start=wl.start,
                                   parallel=wl.parallel, via=wl.via, cc=wl.cc)
        elif isinstance(wl, FlowsWorkload):
            proto = wl.protocol or exp.transport.protocol
            seed = wl.seed if wl.seed is not None else workload_seed(run_seed, i)
            pool = wl.hosts or hosts
            if wl.pattern == "incast":
                assert wl.src is not None and wl.dst is not None
                flows += pt.incast(name, wl.src, wl.dst, wl.size, count=wl.count,
                                   start=wl.start, interval=wl.interval, protocol=proto,
                                   cc=wl.cc)
            elif wl.pattern == "random":
                flows += pt.random_pairs(name, pool, wl.count or 0, wl.size, seed,
                                         start=wl.start, interval=wl.interval,
                                         protocol=proto, cc=wl.cc)
            else:
                flows += pt.permutation(name, pool, wl.size, seed, start=wl.start,
                                        interval=wl.interval, protocol=proto, cc=wl.cc)
        elif isinstance(wl, CbrWorkload):
            flows += pt.cbr(name, wl.src, wl.dst, wl.rate, packet_size=wl.packet_size,
                            duration=wl.duration, start=wl.start, via=wl.via)
    return flows


def path_addresses(exp: Experiment, topo: Any) -> dict[tuple[str, str], str]:
    """(host, path) -> that host's address on the path (multipath topologies)."""
    if not isinstance(exp.topology, MultipathTopology):
        return {}
    out = {}
    for pa in topo.plan:
        out[("client", pa.name)] = pa.client_addr
        if pa.far_node == "server":
            out[("server", pa.name)] = pa.far_addr
    return out


def host_addresses(topo: Any) -> dict[str, str]:
    """host -> its primary address, from the topology's host options."""
    out = {}
    for h in topo.hosts():
        ip = topo.nodeInfo(h).get("ip")
        if ip:
            out[h] = str(ip).split("/")[0]
    return out


def resolve_addresses(flows: list[Any], addr_of: dict[str, str],
                      via_addr: dict[tuple[str, str], str]) -> list[Any]:
    """Fill in addresses; a flow pinned ``via`` a path uses the path address of whichever
    end has one (client -> server: the client's source; server -> client: the client's
    destination), the primary address otherwise."""
    import dataclasses

    from testbed.host.traffic.flows import resolve_flows

    pinned = []
    for f in flows:
        if f.via is not None:
            dst = via_addr.get((f.dst, f.via)) or addr_of.get(f.dst)
            src = via_addr.get((f.src, f.via)) or addr_of.get(f.src)
            f = dataclasses.replace(f, dst_addr=dst, bind_addr=src)
        pinned.append(f)
    return resolve_flows(pinned, addr_of, via_addr)


def mptcp_roles(exp: Experiment, flows: list[Any], hosts: list[str]) -> dict[str, str]:
    """The MPTCP path-manager role of each host: ``client`` opens extra subflows from its
    own addresses (``subflow`` endpoints), ``server`` announces them (``signal``) and
    accepts up to 8 from the peer.

    On a multipath topology the ``client`` host is the multi-homed one: it takes the
    ``client`` role when it opens MPTCP connections (uploads) and the ``server`` role
    when it only accepts them (downloads: the server then opens a subflow to each
    address the client announces). The single-homed ``server`` host is always
    ``server``. On other topologies every host is a ``client``.
    """
    if not isinstance(exp.topology, MultipathTopology):
        return dict.fromkeys(hosts, "client")
    mptcp = [f for f in flows if f.protocol == "mptcp"]
    opens = any(f.src == "client" for f in mptcp)
    accepts = any(f.dst == "client" for f in mptcp)
    return {h: ("client" if h == "client" and (opens or not accepts) else "server")
            for h in hosts}


def flow_sender_hosts(flows: list[Any]) -> list[str]:
    """Hosts that send TCP/MPTCP data (where cwnd sampling makes sense)."""
    return sorted({f.src for f in flows if f.protocol in ("tcp", "mptcp")})


def capture_targets(exp: Experiment, topo: Any, hosts: list[str]) -> list[tuple[str, str]]:
    """(host, interface) pairs to capture, from ``[capture]`` (default: every host's)."""
    cap = exp.capture
    if not cap.enabled:
        return []
    chosen = cap.hosts or hosts
    out = []
    for n1, n2, info in topo.links(sort=True, withInfo=True):
        for node, port, name in ((n1, info.get("port1"), info.get("intfName1")),
                                 (n2, info.get("port2"), info.get("intfName2"))):
            if node in chosen:
                intf = name or f"{node}-eth{port}"
                if cap.interfaces is None or intf in cap.interfaces:
                    out.append((node, intf))
    if cap.interfaces:
        missing = sorted(set(cap.interfaces) - {i for _h, i in out})
        if missing:
            raise SpecError(f"capture.interfaces: {missing[0]!r} is not an interface of "
                            f"the captured hosts ({', '.join(chosen)})")
    return sorted(set(out))


def ping_targets(exp: Experiment, addr_of: dict[str, str],
                 via_addr: dict[tuple[str, str], str]) -> list[dict[str, Any]]:
    """Keyword arguments for one `PingRun` per ping workload (plus its start offset)."""
    out = []
    for i, wl in enumerate(exp.workload):
        if not isinstance(wl, PingWorkload):
            continue
        dst = addr_of.get(wl.dst)
        bind = None
        if wl.via is not None:
            dst = via_addr.get((wl.dst, wl.via)) or dst
            bind = via_addr.get((wl.src, wl.via))
        if dst is None:
            raise SpecError(f"workload[{i}].dst: host {wl.dst!r} has no address")
        out.append({"start": wl.start, "host": wl.src, "dst_addr": dst,
                    "name": exp.workload_name(i), "src": wl.src, "dst": wl.dst,
                    "path": wl.via, "interval": wl.interval, "count": wl.count,
                    "duration": wl.duration, "size": wl.size, "bind": bind})
    return out


# ---------------------------------------------------------------------------------------
# facts for metadata.json


def _package_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


DEB_PACKAGES = ("mininet", "openvswitch-switch", "tshark", "tcpdump", "iproute2", "iperf3",
                "mptcpize", "nftables")


def parse_dpkg_status(text: str, packages: tuple[str, ...] = DEB_PACKAGES) -> dict[str, str]:
    """Installed versions of packages from ``/var/lib/dpkg/status`` text (others left out)."""
    out = {}
    for stanza in text.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            key, sep, value = line.partition(": ")
            if sep and not line.startswith(" "):
                fields[key] = value.strip()
        name = fields.get("Package")
        if name in packages and "installed" in fields.get("Status", "").split() \
                and "Version" in fields:
            out[name] = fields["Version"]
    return out


def git_revision(repo: Path) -> str | None:
    """The checked-out commit, read from ``.git`` without running git (fast in a VM)."""
    git = repo / ".git"
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head
        ref = head[5:]
        if (git / ref).is_file():
            return (git / ref).read_text().strip()
        for line in (git / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split(" ", 1)[0]
    except OSError:
        return None
    return None


@functools.lru_cache(maxsize=1)
def host_facts() -> dict[str, Any]:
    """Kernel, tool and package versions, the git revision: what a reader needs to trust a
    result. Computed once per process (the same for every run of a sweep); ``git_dirty``
    is None inside `testbed vm` (git status re-reads every file there: minutes)."""
    import platform

    from testbed import __version__

    repo = Path(__file__).resolve().parents[1]
    dirty = None
    if os.environ.get("TESTBED_IN_VM") != "1":  # git re-reads every file over the VM's 9p
        try:
            res = CommandRunner().run(["git", "-C", str(repo), "status", "--porcelain",
                                       "--untracked-files=no"], check=False, timeout=20)
            dirty = bool(res.stdout.strip()) if res.returncode == 0 else None
        except Exception:  # facts must never cost the run
            dirty = None
    try:
        debs = parse_dpkg_status(Path("/var/lib/dpkg/status").read_text(errors="replace"))
    except OSError:
        debs = {}
    try:
        from mininet.net import VERSION as mininet_version
    except ImportError:
        mininet_version = None
    return {
        "kernel": platform.release(), "kernel_version": platform.version(),
        "machine": platform.machine(), "hostname": platform.node(),
        "python": platform.python_version(),
        "versions": {
            "testbed": __version__, "git_revision": git_revision(repo), "git_dirty": dirty,
            "mininet": mininet_version, "os-ken": _package_version("os-ken"),
            "pydantic": _package_version("pydantic"), "debian_packages": debs,
        },
    }


def node_dumps(runner: CommandRunner, net: Any, hosts: list[str], logs: Path,
               openflow: bool) -> dict[str, Any]:
    """Sysctls of every host, tc of every shaped interface, OVS flows of every switch.

    Full texts go to ``logs/``; metadata gets the TCP/MPTCP sysctls and the dumps.
    Hosts and switches are dumped a few at a time (a fat-tree has 16 and 20).
    """
    out: dict[str, Any] = {"sysctls": {}, "tc": {}, "ovs": {}}
    keys = sysctl_keys()

    def sysctls(h: str) -> str:
        argv = ["sysctl", "-e", *keys] if keys else ["sysctl", "-a", "-r", SYSCTL_PATTERN]
        return runner.run(argv, host=net.host(h), check=False, record=False).stdout

    for h, text in zip(hosts, in_parallel(sysctls, hosts), strict=True):
        (logs / f"sysctl-{h}.txt").write_text(text)
        out["sysctls"][h] = parse_sysctl(text)
    try:
        out["tc"] = net.tc_dump()
    except Exception as exc:  # a dump must never cost the run
        out["tc"] = {"error": str(exc)}
    (logs / "tc.txt").write_text("".join(f"# {k}\n{v}\n" for k, v in out["tc"].items()))

    def flows(sw: str) -> str:
        argv = ["ovs-ofctl", *(["-O", "OpenFlow13"] if openflow else []), "dump-flows", sw]
        res = runner.run(argv, check=False, record=False)
        return res.stdout if res.returncode == 0 else res.stderr

    switches = sorted(net.topo.switches())
    for sw, text in zip(switches, in_parallel(flows, switches), strict=True):
        out["ovs"][sw] = text
        (logs / f"ovs-{sw}.txt").write_text(text)
    return out


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


# ---------------------------------------------------------------------------------------
# the controller


def make_controller(exp: Experiment, topo: Any, bundle: Bundle,
                    runner: CommandRunner | None = None) -> Any:
    """The controller hook for `Network` (fat-tree), or None.

    exp: the spec; topo: its topology; bundle: where the controller logs go; runner: the
    run's command runner (so the controller's commands land in the transcript).
    """
    kind = exp.controller_kind()
    if kind == "none":
        return None
    from controllers import canonical_app
    from controllers.launcher import ControllerProcess

    return ControllerProcess(canonical_app(kind), topo, CONTROLLER_PORT,
                             bundle.logs_dir / "controller.log", runner=runner)


# ---------------------------------------------------------------------------------------
# one run


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

    def table(name: str) -> Any:
        path = metrics / f"{name}.parquet"
        return pd.read_parquet(path) if path.is_file() else None

    fid = assess(load_metadata(Path(run_dir)), table("flows"), table("ping"), table("events"))
    return _finite({**headline, "fidelity": fid})


def execute_run(plan: Any, bundle: Bundle, meta: dict[str, Any], phase: Phase,
                keeper: Any = None, analyze: bool = True) -> dict:
    """Run one plan into bundle; fill meta; return the headline metrics.

    plan: a `testbed.spec.sweep.RunPlan`; bundle: its (created) folder; meta: the run's
    metadata (written by the caller); phase: called with the name of each phase;
    keeper: a `testbed.run.reuse.NetworkKeeper` that may hand over the previous run's network
    and keep this one's for the next run (None: the run builds and stops its own);
    analyze: False leaves the analysis to `testbed.results.bundle.finish_deferred` later (inside
    the testbed VM, whose software emulation makes it ~10x slower than on the host) and
    returns no headline.
    Everything else started here is stopped before this returns or raises.
    """
    exp: Experiment = plan.spec
    runner = CommandRunner()
    tl = _Timeline(phase)
    meta["timing"] = tl.times
    try:
        tl.enter("preflight")
        meta.update(host_facts())
        topo = build_topology(exp)
        check_against_topology(exp, topo)
        hosts = topo_hosts(exp, topo)
        flows = plan_flows(exp, plan.seed, hosts)
        addr_of, via_addr = host_addresses(topo), path_addresses(exp, topo)
        flows = resolve_addresses(flows, addr_of, via_addr)
        pings = ping_targets(exp, addr_of, via_addr)
        ts = transport_settings(exp)
        _ensure_ccs(runner, exp)
        meta["workload_seeds"] = {exp.workload_name(i): workload_seed(plan.seed, i)
                                  for i, wl in enumerate(exp.workload)
                                  if isinstance(wl, FlowsWorkload)}
        meta["flows_planned"] = len(flows)
        _run_network(exp, plan, bundle, meta, runner, tl, topo, hosts, flows, pings, ts,
                     keeper)
    finally:
        runner.stop_all()
        atomic_write_text(bundle.transcript_path, runner.transcript.to_jsonl())
        atomic_write_text(bundle.root / "commands.sh", runner.transcript.as_shell())
        tl.enter("done")
    problems = _problems(exp, bundle, meta)
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


def _problems(exp: Experiment, bundle: Bundle, meta: dict[str, Any]) -> list[str]:
    """What makes this finished run ``failed`` (`testbed.run.outcome`)."""
    from testbed.run.outcome import run_problems

    log = bundle.samples_dir / "events.jsonl"
    applied = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] \
        if log.is_file() else []
    return run_problems(meta, [ev.at_s for ev in schedule_events(exp)], applied)


def check_kernel_support(plans: list[Any], runner: CommandRunner | None = None) -> None:
    """Before the first run: every congestion control the plans name is available on
    this kernel (loaded if it is a module); raises `UnsupportedError` (exit 2) naming
    the spec key and listing what the kernel offers, before anything is built."""
    runner = runner or CommandRunner()
    seen: set[str] = set()
    for plan in plans:
        exp = plan.spec
        wanted = [("transport.cc", exp.transport.cc)] + [
            (f"workload[{i}].cc", wl.cc) for i, wl in enumerate(exp.workload)
            if getattr(wl, "cc", None)]
        for key, cc in wanted:
            if cc and cc not in seen:
                from testbed.host.transport import ensure_cc

                ensure_cc(runner, cc, key=key)
                seen.add(cc)


def _ensure_ccs(runner: CommandRunner, exp: Experiment) -> None:
    from testbed.host.transport import ensure_cc

    ensure_cc(runner, exp.transport.cc)
    for i, wl in enumerate(exp.workload):
        if getattr(wl, "cc", None):
            ensure_cc(runner, wl.cc, key=f"workload[{i}].cc")


def _run_network(exp: Experiment, plan: Any, bundle: Bundle, meta: dict[str, Any],
                 runner: CommandRunner, tl: _Timeline, topo: Any, hosts: list[str],
                 flows: list[Any], pings: list[dict[str, Any]], ts: Any,
                 keeper: Any = None) -> None:
    from testbed.host.capture import CaptureSet
    from testbed.host.mptcp import configure_host, host_interfaces
    from testbed.host.sampler import Sampler
    from testbed.host.traffic.flows import FlowRun
    from testbed.host.traffic.ping import PingRun
    from testbed.net.monitor import Monitor, with_queue_drops
    from testbed.run.readiness import wait_quiet, warm_targets, warm_up
    from testbed.run.reuse import NetworkKeeper

    tl.enter("set-up")
    controller = make_controller(exp, topo, bundle, runner)
    workdir = bundle.logs_dir / "network"
    keeper = keeper or NetworkKeeper(keep=False)
    net, meta["network"] = keeper.acquire(exp, topo, plan.run_id, runner, controller, workdir)
    ok = False
    try:
        meta["interfaces"] = net.interface_map()
        meta["links"] = net.describe()
        peer_mh = bool(getattr(topo, "server_multihomed", False))
        roles = mptcp_roles(exp, flows, hosts)
        def configure(h: str) -> dict[str, Any]:
            host = net.host(h)
            return configure_host(runner, host, ts, host_interfaces(host), role=roles[h],
                                  peer_multihomed=peer_mh)

        # each host is its own namespace: a few at a time (a fat-tree has 16)
        meta["transport"] = dict(zip(hosts, in_parallel(configure, hosts), strict=True))
        # ready before the clock starts: neighbours and switch flows warm (`readiness`)
        meta["readiness"] = warm_up(runner, net, warm_targets(
            flows, pings, path_addresses(exp, topo), host_addresses(topo).get("server")))
        captures = CaptureSet(runner, bundle.pcap_dir, bundle.logs_dir, exp.capture.snaplen)
        for h, intf in capture_targets(exp, topo, hosts):
            captures.add(net.host(h), intf)
        samplers: list[Any] = []
        flow_run = FlowRun(runner, {h: net.host(h) for h in hosts}, flows,
                           bundle.samples_dir, bundle.logs_dir) if flows else None
        ping_runs: list[tuple[float, Any]] = []
        monitor: Monitor | None = None
        dp_lost: int | None = None
        drops_before: dict[str, int] | None = None
        try:
            captures.start()
            if exp.sampler.enabled:
                for h in exp.sampler.hosts or flow_sender_hosts(flows):
                    s = Sampler(runner, net.host(h), bundle.samples_dir,
                                interval=exp.sampler.interval)
                    s.start()
                    samplers.append(s)
            events = schedule_events(exp)
            net.prepare_schedule(events)  # slow under emulation: before t0 is fixed
            meta["readiness"].update(wait_quiet())  # ... and so is everything above
            dp_lost = _dp_lost(runner, net)
            drops_before = _qdisc_drops(runner)
            monitor = Monitor(net.monitor_links()).start()
            if flow_run is not None:
                flow_run.start()          # servers listening, then clients wait for t0
                t0 = float(flow_run.t0)
            else:
                t0 = time.time()
            meta["t0"] = t0
            tl.enter("traffic")
            net.play(events, t0, bundle.samples_dir / "events.jsonl")
            ping_runs = [(p["start"], PingRun(
                runner, net.host(p["host"]), p["dst_addr"], bundle.samples_dir,
                name=p["name"], src=p["src"], dst=p["dst"], path=p["path"],
                interval=p["interval"], count=p["count"], duration=p["duration"],
                size=p["size"], bind=p["bind"])) for p in pings]
            meta["ended_early"] = _traffic(exp, net, t0, flow_run, ping_runs)
            meta["t_traffic_end"] = time.time()
            tl.enter("teardown")
        finally:
            if monitor is not None:
                raw = monitor.stop()
                try:  # never in the way of stopping flows and captures below
                    raw["links"] = with_queue_drops(raw["links"], drops_before,
                                                    _qdisc_drops(runner))
                    raw.update(_fidelity_extra(runner, net, exp, topo, pings, dp_lost))
                except (TestbedError, OSError) as exc:
                    raw.setdefault("errors", []).append(f"after the traffic: {exc}")
                meta["fidelity_raw"] = raw
            if flow_run is not None:
                flow_run.stop()
                meta["flows"] = _flow_summary(flow_run.collect())
            for _start, pr in ping_runs:
                if pr.proc is not None:
                    pr.stop()
                    pr.collect()
            meta["samplers"] = [s.stop() for s in samplers]
            meta["captures"] = captures.stop()
        meta.update(node_dumps(runner, net, hosts, bundle.logs_dir,
                               openflow=controller is not None))
        if controller is not None:
            meta["controller"] = {"kind": exp.controller_kind(), **controller.describe()}
        ok = True
    finally:
        meta["network_cleanup"] = keeper.release(net, ok)


def _dp_lost(runner: CommandRunner, net: Any) -> int | None:
    """Packets the OVS kernel datapath has lost on upcalls so far (None: no switches,
    or ovs-dpctl could not tell)."""
    from testbed.net.monitor import parse_dpctl_lost

    if not net.topo.switches():
        return None
    res = runner.run(["ovs-dpctl", "show"], timeout=20, check=False)
    return parse_dpctl_lost(res.stdout) if res.returncode == 0 else None


def _qdisc_drops(runner: CommandRunner) -> dict[str, int] | None:
    """Packets each root-namespace interface's qdiscs have dropped so far."""
    from testbed.net.monitor import parse_qdisc_drops

    res = runner.run(["tc", "-s", "-j", "qdisc", "show"], timeout=20, check=False)
    return parse_qdisc_drops(res.stdout) if res.returncode == 0 else None


def _fidelity_extra(runner: CommandRunner, net: Any, exp: Experiment, topo: Any,
                    pings: list[dict[str, Any]], dp_lost_before: int | None
                    ) -> dict[str, Any]:
    """The rest of ``fidelity_raw``: upcalls lost, RPS, CPUs, each ping's configured RTT."""
    from testbed.net.links import base_rtt_s
    from testbed.net.steering import online_cpus

    after = _dp_lost(runner, net) if dp_lost_before is not None else None
    others = {p.name for p in getattr(exp.topology, "paths", [])}
    switch_of = {p.name: f"s{i + 1}" for i, p in enumerate(getattr(exp.topology, "paths", []))}
    rtts = []
    for p in pings:
        avoid = frozenset(switch_of[o] for o in others if o != p["path"]) \
            if p["path"] in switch_of else frozenset()
        if p["path"] is None and switch_of:   # unpinned: the main table uses path 0
            avoid = frozenset(list(switch_of.values())[1:])
        rtt = base_rtt_s(topo, p["host"], p["dst"], avoid)
        rtts.append({"name": p["name"], "src": p["src"], "dst": p["dst"], "path": p["path"],
                     "base_rtt_ms": None if rtt is None else round(rtt * 1000, 3)})
    return {"ovs_upcalls_lost": None if after is None or dp_lost_before is None
            else after - dp_lost_before,
            "rps_mask": net.rps_mask, "cpus": len(online_cpus()),
            "pings": rtts}


def _traffic(exp: Experiment, net: Any, t0: float, flow_run: Any,
             ping_runs: list[tuple[float, Any]]) -> bool:
    """Wait out the run, starting pings on time; True when it ended early (all done)."""
    end = t0 + exp.duration
    pending = sorted(ping_runs, key=lambda p: p[0])
    finite_flows = flow_run is not None and all(
        f.size_bytes is not None or f.duration_s is not None for f in flow_run.flows)
    while True:
        now = time.time()
        while pending and t0 + pending[0][0] <= now:
            pending.pop(0)[1].start()
        if now >= end:
            return False
        net.check()
        if exp.stop_when_done and flow_run is not None and finite_flows \
                and flow_run.wait(timeout=0):
            return True
        nxt = min([end] + [t0 + s for s, _ in pending])
        time.sleep(max(0.0, min(POLL_S, nxt - time.time())))


def _flow_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    errors = [r for r in records if r.get("error")]
    return {"count": len(records), "failed": len(errors),
            "errors": sorted({str(r["error"]) for r in errors})[:5]}


def recover_bundle(bundle: Bundle) -> dict[str, list[str]]:
    """Remove what the network of a run whose process died left behind (by its manifest).

    bundle: a bundle still marked ``running``; returns what was removed.  The manifest
    in the bundle is never trusted on its own (`testbed.net.cleanup.cleanup_from_manifest`).
    """
    from testbed.net.cleanup import MANIFEST, cleanup_from_manifest, has_manifest

    manifest = bundle.logs_dir / "network" / MANIFEST
    if not manifest.is_file() and not has_manifest(manifest):
        return {}
    return cleanup_from_manifest(manifest)  # acts on the state directory's copy alone


# ---------------------------------------------------------------------------------------
# dry run


class _FakeHost:
    """Stands in for a Mininet host in a dry run (commands print ``# in <name>``)."""

    def __init__(self, name: str):
        self.name = name
        self.pid = 0


def dry_run_commands(plan: Any, run_dir: Path) -> CommandRunner:
    """The commands the first run would execute, recorded by a dry-run runner (no root).

    plan: the run; run_dir: where its bundle would be (paths in the commands).
    Mininet's own node and veth creation is not listed (Mininet does it itself).
    """
    from testbed.host.capture import tcpdump_argv
    from testbed.host.mptcp import HostInterface, plan_mptcp
    from testbed.host.sampler import ss_argv
    from testbed.host.traffic.flows import assign_ports, client_argv, server_argv
    from testbed.host.traffic.ping import ping_argv
    from testbed.host.transport import buffer_sysctls, check_sysctls, sysctl_write_argv
    from testbed.net import shaping as sh
    from testbed.net.links import link_groups

    exp: Experiment = plan.spec
    run_dir = Path(run_dir)
    runner = CommandRunner(dry_run=True)
    if isinstance(exp.topology, CustomTopology):
        return runner  # a custom topology is code: a dry run neither imports nor builds it
    topo = build_topology(exp)
    check_against_topology(exp, topo)
    hosts = topo_hosts(exp, topo)
    fake = {h: _FakeHost(h) for h in topo.hosts()}
    flows = plan_flows(exp, plan.seed, hosts)
    addr_of, via_addr = host_addresses(topo), path_addresses(exp, topo)
    flows = resolve_addresses(flows, addr_of, via_addr)
    switches = set(topo.switches())
    _dry_run_controller(runner, exp, topo, run_dir)
    for link in link_groups(topo).values():
        for eg in link.egress:
            for argv in sh.setup_commands(eg.intf, link.shape):
                runner.run(argv, host=fake[eg.node] if eg.node not in switches else None)
    for host, argv in getattr(topo, "setup_commands", list)():
        runner.run(argv, host=fake[host])
    ts = transport_settings(exp)
    roles = mptcp_roles(exp, flows, hosts)
    for h in hosts:
        values = {"net.ipv4.tcp_congestion_control": exp.transport.cc,
                  **buffer_sysctls(ts.rmem, ts.wmem), **check_sysctls(ts.sysctl)}
        for key, value in values.items():
            runner.run(sysctl_write_argv(key, value), host=fake[h])
        if ts.protocol == "mptcp":
            ifaces = _topo_interfaces(topo, h)
            for step in plan_mptcp(ts, [HostInterface(n, a) for n, a in ifaces], roles[h],
                                   bool(getattr(topo, "server_multihomed", False))):
                runner.run(list(step.argv), host=fake[h])
    for h, intf in capture_targets(exp, topo, hosts):
        runner.spawn(tcpdump_argv(intf, run_dir / "pcap" / f"{h}-{intf}.pcap",
                                  exp.capture.snaplen), host=fake[h])
    if exp.sampler.enabled:
        for h in exp.sampler.hosts or flow_sender_hosts(flows):
            runner.run(ss_argv(), host=fake[h])
    flows, servers = assign_ports(flows)
    logs = run_dir / "logs"
    for (h, proto), port in servers.items():
        role = "sink" if proto == "udp" else "server"
        runner.spawn(server_argv(port, proto, logs / f"flowtool-{role}-{h}-{port}.jsonl"),
                     host=fake[h])
    for src in sorted({f.src for f in flows}):
        runner.spawn(client_argv(logs / f"flows-{src}.json", logs / f"flows-{src}.jsonl",
                                 0.0), host=fake[src])
    for p in ping_targets(exp, addr_of, via_addr):
        runner.spawn(ping_argv(p["dst_addr"], interval=p["interval"], count=p["count"],
                               duration=p["duration"], size=p["size"], bind=p["bind"]),
                     host=fake[p["host"]])
    _dry_run_schedule(runner, exp, topo, fake)
    return runner


def _dry_run_schedule(runner: CommandRunner, exp: Experiment, topo: Any,
                      fake: dict[str, Any]) -> None:
    """The schedule's link changes as `Network.apply` makes them at their times: per event
    and namespace one ``tc -force -batch -`` for shape changes, then one ``ip -force
    -batch -`` for down/up, each with its input (what the batch shells are sent)."""
    from testbed.core.commands import batch_text
    from testbed.net import shaping as sh
    from testbed.net.links import link_groups

    links = link_groups(topo)
    shapes = {name: link.shape for name, link in links.items()}
    up = dict.fromkeys(links, True)
    for ev in schedule_events(exp):
        link = links[ev.link]
        new = ev.change.apply_to(shapes[ev.link])
        jobs: list[tuple[str, str, list[list[str]]]] = []  # (tool, node, commands)
        if new != shapes[ev.link]:
            per_node: dict[str, list[list[str]]] = {}
            for eg in link.egress:
                per_node.setdefault(eg.node if eg.in_namespace else "", []).extend(
                    sh.change_commands(eg.intf, shapes[ev.link], new))
            jobs += [("tc", node, cmds) for node, cmds in per_node.items()]
            shapes[ev.link] = new
        if ev.change.up is not None and ev.change.up != up[ev.link]:
            per_node = {}
            for eg in link.updown:
                per_node.setdefault(eg.node if eg.in_namespace else "", []).append(
                    sh.link_state_command(eg.intf, ev.change.up))
            jobs += [("ip", node, cmds) for node, cmds in per_node.items()]
            up[ev.link] = ev.change.up
        for tool, node, cmds in jobs:
            runner.run([tool, "-force", "-batch", "-"], input=batch_text(cmds),
                       host=fake[node] if node else None, at=ev.at_s)


def _dry_run_controller(runner: CommandRunner, exp: Experiment, topo: Any,
                        run_dir: Path) -> None:
    """The controller's command line and (spray) its nftables tables, as a run makes them."""
    kind = exp.controller_kind()
    if kind == "none":
        return
    import sys

    from controllers import canonical_app
    from controllers.launcher import controller_argv
    from controllers.paths import compute_routes
    from controllers.rules import spray_nft_script

    app = canonical_app(kind)
    log = run_dir / "logs" / "controller.log"
    runner.spawn(controller_argv(sys.executable, app, CONTROLLER_PORT,
                                 log.with_name(log.name + ".layout.json"),
                                 log.with_name(log.name + ".status.jsonl")))
    if app == "spray":
        routes = compute_routes(topo.layout)
        for sw in topo.layout.switches:
            script = spray_nft_script(routes, sw.name)
            if script is not None:
                runner.run(["nft", "-f", "-"], input=script)


def _topo_interfaces(topo: Any, host: str) -> list[tuple[str, str]]:
    """(interface, address) of host from the topology's link options."""
    out = []
    for n1, n2, info in topo.links(sort=True, withInfo=True):
        for node, port, params in ((n1, info.get("port1"), info.get("params1")),
                                   (n2, info.get("port2"), info.get("params2"))):
            ip = (params or {}).get("ip")
            if node == host and ip:
                out.append((f"{node}-eth{port}", str(ip).split("/")[0]))
    return sorted(out)

