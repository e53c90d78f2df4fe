"""The whole spec, `Experiment`, and its checks that involve several keys: hosts, links,
paths, times, patterns.

`check_experiment` runs when an `Experiment` validates, after each field validated on
its own (the parts are the models of `testbed.spec.model`); it raises one `SpecError`
with a ``key path: what is wrong; hint`` line per problem, so that every problem of a
spec is reported at once::

    workload[0].dst: no host named 'sever'; did you mean 'server'?
    schedule[0].at: 30s is not before the end of the run (duration = 10s)
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field, model_validator

from testbed.core.errors import SpecError
from testbed.spec.controller_kinds import FABRIC_KINDS, NO_CONTROLLER, quoted_choices
from testbed.spec.model import (
    COUPLED_CCS,
    HANDOVER_CCS,
    BulkWorkload,
    Capture,
    Controller,
    FatTreeTopology,
    FlowsWorkload,
    MultipathTopology,
    Name,
    PathSpec,
    PingWorkload,
    Sampler,
    ScheduleEvent,
    SpecModel,
    Topology,
    Transport,
    Workload,
)
from testbed.spec.profile import profile_named
from testbed.spec.quantities import PositiveDuration, format_duration_exact


class Experiment(SpecModel):
    """One experiment spec (the whole TOML file)."""

    name: Name
    description: str = ""
    duration: PositiveDuration
    seed: Annotated[int, Field(ge=0, lt=2**32)] = 1
    repetitions: Annotated[int, Field(ge=1, le=1000)] = 1
    repetition: Annotated[int, Field(ge=1)] | None = None
    stop_when_done: bool = False
    topology: Topology
    controller: Controller = Field(default_factory=Controller)
    transport: Transport = Field(default_factory=Transport)
    workload: Annotated[list[Workload], Field(min_length=1)]
    schedule: list[ScheduleEvent] = Field(default_factory=list)
    capture: Capture = Field(default_factory=Capture)
    sampler: Sampler = Field(default_factory=Sampler)
    sweep: dict[str, Annotated[list[Any], Field(min_length=1)]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _cross_checks(self) -> Experiment:
        check_experiment(self)
        return self

    def controller_kind(self) -> str:
        """The effective controller: the given kind, else ecmp on a fat-tree, none otherwise."""
        if self.controller.kind is not None:
            return self.controller.kind
        return "ecmp" if isinstance(self.topology, FatTreeTopology) else "none"

    def repetition_numbers(self) -> list[int]:
        """The repetitions this spec runs: 1..repetitions, or just ``repetition``."""
        if self.repetition is not None:
            return [self.repetition]
        return list(range(1, self.repetitions + 1))

    def workload_name(self, index: int) -> str:
        """The workload's name, or ``<kind><index>`` when it has none."""
        wl = self.workload[index]
        return wl.name or f"{wl.kind}{index}"


def check_experiment(exp: Experiment) -> None:
    """Checks that involve several keys; raise one `SpecError` with a line per problem.

    exp: a spec whose fields each validated on their own. Each independent part (the
    controller, each workload, each schedule event, each host list entry) is checked on
    its own, so that every problem is reported at once.
    """
    problems: list[str] = []

    def attempt(check: Callable[..., None], *args: Any) -> None:
        try:
            check(*args)
        except SpecError as exc:
            problems.extend(str(exc).splitlines())

    topo = exp.topology
    hosts = topo.host_names()
    links = topo.link_names()
    if isinstance(topo, MultipathTopology):
        attempt(_no_duplicates, [p.name for p in topo.paths], "topology.paths", "name")
        for i, path in enumerate(topo.paths):
            attempt(_check_path, path, f"topology.paths[{i}]")
    attempt(_check_repetition, exp)
    attempt(_check_controller, exp)
    attempt(_check_coupled, exp)
    attempt(_check_profile, exp)
    names = [exp.workload_name(i) for i in range(len(exp.workload))]
    attempt(_no_duplicates, names, "workload", "name")
    for i, wl in enumerate(exp.workload):
        attempt(_check_workload, exp, i, wl, hosts)
    for i, ev in enumerate(exp.schedule):
        attempt(_check_event, exp, i, ev, links)
    attempt(_check_sequence, exp)
    for key, listed in (("capture.hosts", exp.capture.hosts),
                        ("capture.interfaces", exp.capture.interfaces),
                        ("sampler.hosts", exp.sampler.hosts)):
        if listed == []:  # "none" or "all"? capture.hosts = [] captured every host
            table = key.split(".")[0]
            problems.append(f"{key}: an empty list; leave the key out for every one, or set "
                            f"{table}.enabled = false for none")
    if hosts is not None:
        for key, listed in (("capture.hosts", exp.capture.hosts),
                            ("sampler.hosts", exp.sampler.hosts)):
            for j, h in enumerate(listed or []):
                attempt(_check_host, h, hosts, f"{key}[{j}]")
    if problems:
        raise SpecError("\n".join(problems))


def _check_repetition(exp: Experiment) -> None:
    if exp.repetition is not None and exp.repetitions != 1:
        raise SpecError("repetition: set either repetitions (how many) or repetition "
                        "(just this one), not both")


def _check_controller(exp: Experiment) -> None:
    topo = exp.topology
    kind = exp.controller.kind
    if kind not in (None, NO_CONTROLLER) and not isinstance(topo, FatTreeTopology):
        raise SpecError(f"controller.kind: '{kind}' needs topology.kind = 'fattree'; "
                        f"use '{NO_CONTROLLER}' (or leave [controller] out) for {topo.kind!r}")
    if kind == NO_CONTROLLER and isinstance(topo, FatTreeTopology):
        raise SpecError("controller.kind: a fat-tree needs a controller; use "
                        f"{quoted_choices(FABRIC_KINDS)}")


def _check_coupled(exp: Experiment) -> None:
    """A coupled congestion control (`COUPLED_CCS`) only makes sense for MPTCP."""
    problems = []
    uses = [("transport.cc", exp.transport.cc, exp.transport.protocol)]
    uses += [(f"workload[{i}].cc", wl.cc, getattr(wl, "protocol", None)
              or exp.transport.protocol) for i, wl in enumerate(exp.workload)
             if getattr(wl, "cc", None)]
    ho = exp.transport.handover
    if ho != "none":
        if exp.transport.cc != "reno":
            problems.append(f"transport.handover: {ho!r} is a NewReno variant (as in P3); "
                            f"set transport.cc = \"reno\" (it is {exp.transport.cc!r}) or "
                            "transport.handover = \"none\"")
        if exp.transport.protocol != "tcp":
            problems.append(f"transport.handover: {ho!r} runs on plain TCP senders; set "
                            "transport.protocol = \"tcp\" or transport.handover = \"none\"")
        if not exp.schedule:
            problems.append(f"transport.handover: {ho!r} acts at the schedule's events that "
                            "bring a link back or change its rate or delay, and this spec "
                            "has none; add [[schedule]] events or set transport.handover = "
                            "\"none\"")
        if isinstance(exp.topology, FatTreeTopology):
            problems.append(f"transport.handover: {ho!r} models a sender whose own access "
                            "link changes (P3); on a fat-tree any link's event would restart "
                            "every sender: use topology.kind = \"multipath\"")
        for i, wl in enumerate(exp.workload):
            if getattr(wl, "cc", None) or getattr(wl, "protocol", None) == "mptcp":
                problems.append(f"workload[{i}]: its own cc/protocol would bypass "
                                f"transport.handover = {ho!r}; remove them from the workload")
    for key, cc, protocol in uses:
        if cc in HANDOVER_CCS.values():
            problems.append(f"{key}: {cc!r} is chosen with transport.handover = "
                            f"{next(k for k, v in HANDOVER_CCS.items() if v == cc)!r} "
                            "(and cc = \"reno\"), not by name")
        if cc in COUPLED_CCS and protocol != "mptcp":
            problems.append(f"{key}: {cc!r} couples the subflows of an MPTCP connection; "
                            f"set the protocol to 'mptcp' (or choose a per-socket control "
                            f"such as 'reno' or 'cubic')")
    if problems:
        raise SpecError("\n".join(problems))


def _check_profile(exp: Experiment) -> None:
    """A profile that requires a congestion control (``tcp-2006``: reno) gets it for
    every socket: ``transport.cc`` and every workload's ``cc``."""
    profile = profile_named(exp.transport.profile)
    if profile.cc is None:
        return
    uses = [("transport.cc", exp.transport.cc)]
    uses += [(f"workload[{i}].cc", wl.cc) for i, wl in enumerate(exp.workload)
             if getattr(wl, "cc", None)]
    problems = [f"{key}: {cc!r} with transport.profile = {profile.name!r}, which is "
                f"{profile.cc} (NewReno) by definition; use cc = {profile.cc!r} (or leave "
                f"cc out), or transport.profile = 'linux'"
                for key, cc in uses if cc != profile.cc]
    if problems:
        raise SpecError("\n".join(problems))


def _check_path(path: PathSpec, where: str) -> None:
    """The keys of a path that go together: jitter's options, and one kind of loss."""
    problems = []
    if path.distribution is not None and not path.jitter:
        problems.append(f"{where}.distribution: shapes the jitter, but this path has none; "
                        "set jitter (e.g. jitter = \"5ms\") or remove distribution")
    if not path.reorder and not path.jitter:
        problems.append(f"{where}.reorder: false keeps jittered packets in order, but this "
                        "path has no jitter; set jitter or remove reorder")
    if path.ge is not None and path.loss:
        problems.append(f"{where}.ge: give either loss (random) or ge (Gilbert-Elliott), "
                        "not both; remove one of them")
    if problems:
        raise SpecError("\n".join(problems))


def _check_sequence(exp: Experiment) -> None:
    """Events of one link in time order: each must change something from the state the
    ones before it left (a link taken down twice dropped the second event from the plan
    without a word), and two events may not change one link at the same time (which
    acts first would be an accident of their order)."""
    problems = []
    by_link: dict[str, list[tuple[float, int, ScheduleEvent]]] = {}
    for i, ev in enumerate(exp.schedule):
        by_link.setdefault(ev.link, []).append((ev.at, i, ev))
    for link, events in by_link.items():
        up, set_by, last = True, None, {}  # set_by: when the state last changed
        for at, i, ev in sorted(events, key=lambda e: (e[0], e[1])):
            # the other event is named by its time: a trace's rows are events of their own,
            # whose indices are not the spec's
            if at in last:
                problems.append(f"schedule[{i}]: changes link {link!r} at {_fmt_d(at)}, as "
                                "another event does at that time; give them different "
                                "times")
            last[at] = i
            if ev.up is not None and ev.down is not None:
                continue  # whether it is up or down is its own problem (_check_event)
            if ev.link_up is not None and ev.link_up == up and not ev.shape_changes():
                why = "it starts up" if set_by is None else \
                    f"the event at {_fmt_d(set_by)} took it {'up' if up else 'down'}"
                problems.append(f"schedule[{i}]: link {link!r} is already "
                                f"{'up' if up else 'down'} at {_fmt_d(at)} ({why}), so this "
                                "event changes nothing; remove it")
            if ev.link_up is not None:
                up, set_by = ev.link_up, at
    if problems:
        raise SpecError("\n".join(problems))


def _check_event(exp: Experiment, i: int, ev: ScheduleEvent, links: list[str] | None) -> None:
    topo = exp.topology
    where = f"schedule[{i}]"
    if not ev.changes():
        raise SpecError(f"{where}: changes nothing; give down = true/false, up = true/false "
                        "or one of bw, delay, jitter, loss")
    if ev.up is not None and ev.down is not None:
        raise SpecError(f"{where}.up: give up or down, not both (up = true is down = false)")
    if ev.link_up is False and ev.shape_changes():
        key = "down" if ev.down is not None else "up"
        raise SpecError(f"{where}.{key}: a link taken down cannot change bw/delay/jitter/"
                        "loss in the same event; use a second event")
    if ev.at >= exp.duration:
        raise SpecError(f"{where}.at: {_fmt_d(ev.at)} is not before the end of the run "
                        f"(duration = {_fmt_d(exp.duration)})")
    if links is not None and ev.link not in links:
        close = difflib.get_close_matches(ev.link, links, n=1)
        hint = f"did you mean {close[0]!r}?" if close else \
            "the paths are " + ", ".join(repr(x) for x in links)
        raise SpecError(f"{where}.link: no link named {ev.link!r}; {hint}")
    if isinstance(topo, FatTreeTopology):
        _check_fattree_link(topo, ev.link, f"{where}.link")
    if isinstance(topo, MultipathTopology) and ev.loss is not None:
        path = next((p for p in topo.paths if p.name == ev.link), None)
        if path is not None and path.ge is not None:
            raise SpecError(f"{where}.loss: path {ev.link!r} has Gilbert-Elliott loss (ge), "
                            "which a schedule cannot change; remove loss from this event")


def _check_workload(exp: Experiment, i: int, wl: Any, hosts: list[str] | None) -> None:
    """Every problem of one workload, one line each (not only the first)."""
    where = f"workload[{i}]"
    problems: list[str] = []

    def attempt(check: Any, *args: Any) -> None:
        try:
            check(*args)
        except SpecError as exc:
            problems.extend(str(exc).splitlines())

    attempt(_check_workload_times, exp, wl, where)
    attempt(_check_via, exp, wl, where)
    if isinstance(wl, FlowsWorkload):
        attempt(_check_flows, wl, where, hosts)
        attempt(_check_flows_end, exp, wl, where)
    else:
        for key in ("src", "dst"):
            if hosts is not None:
                attempt(_check_host, getattr(wl, key), hosts, f"{where}.{key}")
        if wl.src == wl.dst:
            problems.append(f"{where}.dst: same host as src ({wl.src!r})")
    if problems:
        raise SpecError("\n".join(problems))


def _check_workload_times(exp: Experiment, wl: Any, where: str) -> None:
    """A workload's start, duration and ping settings against the run."""
    problems = []
    if wl.start >= exp.duration:
        problems.append(f"{where}.start: {_fmt_d(wl.start)} is not before the end of the run "
                        f"(duration = {_fmt_d(exp.duration)})")
    if isinstance(wl, BulkWorkload) and wl.size is not None and wl.duration is not None:
        problems.append(f"{where}.duration: give size or duration, not both")
    own = getattr(wl, "duration", None)
    if own is not None and wl.start < exp.duration and wl.start + own > exp.duration + 1e-9:
        problems.append(f"{where}.duration: {_fmt_d(own)} from its start at "
                        f"{_fmt_d(wl.start)} runs past the end of the run (duration = "
                        f"{_fmt_d(exp.duration)}); shorten it or lengthen the run")
    if isinstance(wl, PingWorkload):
        if wl.size < 16:  # no room for the timestamp ping times an echo with
            problems.append(f"{where}.size: {wl.size} bytes is too small for ping to time "
                            "an echo (it prints no RTT below 16): use 16 or more")
        if wl.duration is not None and not float(wl.duration).is_integer():
            problems.append(f"{where}.duration: {_fmt_d(wl.duration)} is not whole seconds; "
                            "ping's deadline (-w) is, so give e.g. \"1s\" or \"2s\"")
    if problems:
        raise SpecError("\n".join(problems))


def _check_via(exp: Experiment, wl: Any, where: str) -> None:
    """A workload pinned to a path (``via``): a multipath topology's path, TCP only."""
    via = getattr(wl, "via", None)
    if via is None:
        return
    if not isinstance(exp.topology, MultipathTopology):
        raise SpecError(f"{where}.via: pinning to a path needs topology.kind = 'multipath'")
    if via not in exp.topology.link_names():
        names = exp.topology.link_names()
        close = difflib.get_close_matches(via, names, n=1)
        hint = f"did you mean {close[0]!r}?" if close else \
            "the paths are " + ", ".join(repr(x) for x in names)
        raise SpecError(f"{where}.via: no path named {via!r}; {hint}")
    if getattr(wl, "protocol", None) == "mptcp" or (
            isinstance(wl, BulkWorkload) and wl.protocol is None
            and exp.transport.protocol == "mptcp"):
        raise SpecError(f"{where}.via: an MPTCP connection uses every path; pin only "
                        "TCP flows (set protocol = 'tcp' on this workload)")


def _flows_count(wl: FlowsWorkload) -> int | None:
    """How many flows a flows workload starts (None: its host pool is the topology's)."""
    if wl.pattern == "incast":
        senders = len(wl.src or [])
        return senders if wl.count is None else min(wl.count, senders)
    if wl.pattern == "random":
        return wl.count
    return len(wl.hosts) if wl.hosts is not None else None


def _check_flows_end(exp: Experiment, wl: FlowsWorkload, where: str) -> None:
    """The last flow of a workload must start before the run ends (it never ran)."""
    n = _flows_count(wl)
    if n and wl.start + (n - 1) * wl.interval >= exp.duration:
        raise SpecError(f"{where}.interval: its flow {n} would start at "
                        f"{_fmt_d(wl.start + (n - 1) * wl.interval)}, not before the end of "
                        f"the run (duration = {_fmt_d(exp.duration)}); give a shorter "
                        "interval, fewer flows or a longer run")


def _check_flows(wl: FlowsWorkload, where: str, hosts: list[str] | None) -> None:
    needs = {"incast": ("src", "dst"), "random": (), "permutation": ()}[wl.pattern]
    allowed = {"incast": {"src", "dst", "count"}, "random": {"hosts", "count"},
               "permutation": {"hosts"}}[wl.pattern]
    for key in needs:
        if getattr(wl, key) is None:
            raise SpecError(f"{where}.{key}: pattern '{wl.pattern}' needs {key}")
    for key in ("src", "dst", "hosts", "count"):
        if getattr(wl, key) is not None and key not in allowed:
            raise SpecError(f"{where}.{key}: not used by pattern '{wl.pattern}' (it uses "
                            + ", ".join(sorted(allowed)) + ")")
    if wl.pattern == "random" and wl.count is None:
        raise SpecError(f"{where}.count: pattern 'random' needs count")
    for key in ("src", "hosts"):
        listed = getattr(wl, key) or []
        _no_duplicates(listed, f"{where}.{key}", None)
        if hosts is not None:
            for j, h in enumerate(listed):
                _check_host(h, hosts, f"{where}.{key}[{j}]")
    if wl.dst is not None and hosts is not None:
        _check_host(wl.dst, hosts, f"{where}.dst")
    if wl.pattern == "incast":
        assert wl.src is not None
        if wl.dst in wl.src:
            raise SpecError(f"{where}.src: lists the destination {wl.dst!r} as a sender")
        if wl.count is not None and wl.count > len(wl.src):
            raise SpecError(f"{where}.count: {wl.count} flows but only {len(wl.src)} "
                            "senders in src (one flow per sender)")
    pool = wl.hosts if wl.hosts is not None else hosts
    if wl.pattern in ("random", "permutation") and pool is not None and len(pool) < 2:
        raise SpecError(f"{where}.hosts: pattern '{wl.pattern}' needs at least 2 hosts")


def _check_fattree_link(topo: FatTreeTopology, link: str, where: str) -> None:
    nodes = link.split("-")
    known = set(topo.host_names()) | set(topo.switch_names())
    if len(nodes) != 2 or not all(n in known for n in nodes):
        raise SpecError(f"{where}: {link!r} is not a fat-tree link; name it after its two "
                        f"nodes, e.g. 'E0-A0' or 'S0-E0' (k={topo.k})")


def _check_host(name: str, hosts: list[str], where: str) -> None:
    if name not in hosts:
        close = difflib.get_close_matches(name, hosts, n=1)
        hint = f"did you mean {close[0]!r}?" if close else (
            "hosts are " + (", ".join(hosts) if len(hosts) <= 6
                            else f"{hosts[0]} .. {hosts[-1]}"))
        raise SpecError(f"{where}: no host named {name!r}; {hint}")


def _no_duplicates(items: list[str], where: str, key: str | None) -> None:
    seen: set[str] = set()
    for j, item in enumerate(items):
        if item in seen:
            at = f"{where}[{j}].{key}" if key else f"{where}[{j}]"
            raise SpecError(f"{at}: duplicate {item!r}")
        seen.add(item)


def _fmt_d(seconds: float) -> str:
    return format_duration_exact(seconds)

