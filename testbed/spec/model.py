"""Experiment specs: pydantic models of the TOML file, loading, and readable errors.

A spec is pure data. `load_spec_file` reads TOML into a plain dict; `validate_spec` turns
a dict into a frozen `Experiment` (unknown keys forbidden). Quantities are written with
units (``"4Mbit"``, ``"25us"``, ``"64KiB"``, ``"0.5%"``) and stored in base units
(bit/s, seconds, bytes, percentage points); dumping with ``mode="json"`` writes the unit
strings back, exactly.

Every mistake raises `SpecError`: one line per problem, all problems at once, each naming
the file (or ``--set KEY``), the dotted key path and a hint built from the given value::

    spec.toml: topology.paths[0].bw: "10 mbps" is not a rate; did you mean "10Mbit"?
    spec.toml: topology.paths[0].delya: unknown key; did you mean 'delay'?
    spec.toml: workload[0].dst: no host named 'sever'; did you mean 'server'?

The full key reference is ``docs/spec.md``. Sweeps, overrides, seeds and run ids live in
`testbed.spec.sweep`.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
import types
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PlainSerializer,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from testbed.core.compat import tomllib
from testbed.core.errors import InputError, SpecError, UnitError
from testbed.core.units import parse_duration, parse_percent, parse_rate, parse_size
from testbed.spec.controller_kinds import (
    CONTROLLER_KINDS,
    FABRIC_KINDS,
    NO_CONTROLLER,
    quoted_choices,
)

# ---------------------------------------------------------------------------------------
# quantities with units


def format_rate_exact(bps: int) -> str:
    """A rate as the shortest unit string that parses back to exactly bps."""
    for unit, factor in (("Gbit", 10**9), ("Mbit", 10**6), ("kbit", 10**3)):
        if bps and bps % factor == 0:
            return f"{bps // factor}{unit}"
    return f"{bps}bit"


def format_duration_exact(seconds: float) -> str:
    """A duration as the shortest of s/ms/us/ns strings that parses back to exactly seconds."""
    best = f"{seconds!r}s"
    for unit, factor in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        text = f"{seconds / factor:.12g}{unit}"
        if "e" not in text and parse_duration(text) == seconds and len(text) < len(best):
            best = text
    return best


def format_size_exact(nbytes: int) -> str:
    """A size as the shortest unit string that parses back to exactly nbytes."""
    best = f"{nbytes}B"
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10),
                         ("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if nbytes and nbytes % factor == 0:
            text = f"{nbytes // factor}{unit}"
            if len(text) < len(best):
                best = text
    return best


def format_percent_exact(points: float) -> str:
    """A percentage as a string that parses back to exactly points."""
    text = f"{points:.12g}%"
    return text if parse_percent(text) == points else f"{points!r}%"


_UNIT_GUESSES: dict[str, dict[str, str]] = {
    "rate": {"bps": "bit", "b/s": "bit", "bit/s": "bit", "bits": "bit",
             "k": "kbit", "kbps": "kbit", "kb/s": "kbit", "kbit/s": "kbit", "kbits": "kbit",
             "m": "Mbit", "mbps": "Mbit", "mb/s": "Mbit", "mbit/s": "Mbit", "mbits": "Mbit",
             "mb": "Mbit", "g": "Gbit", "gbps": "Gbit", "gb/s": "Gbit", "gbit/s": "Gbit",
             "gbits": "Gbit", "gb": "Gbit"},
    "duration": {"": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s",
                 "msec": "ms", "msecs": "ms", "millisecond": "ms", "milliseconds": "ms",
                 "usec": "us", "usecs": "us", "microsecond": "us", "microseconds": "us",
                 "mins": "min", "minute": "min", "minutes": "min", "hr": "h", "hour": "h",
                 "hours": "h"},
    "size": {"": "B", "byte": "B", "bytes": "B", "k": "KB", "kbyte": "KB", "kbytes": "KB",
             "kilobyte": "KB", "kilobytes": "KB", "m": "MB", "mbyte": "MB", "mbytes": "MB",
             "megabyte": "MB", "megabytes": "MB", "g": "GB", "gbyte": "GB",
             "gigabyte": "GB", "gigabytes": "GB"},
    "percentage": {"": "%", "pct": "%", "percent": "%"},
}
_QUANTITY_RE = re.compile(r"^\s*(?P<num>[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*"
                          r"(?P<unit>[A-Za-z/%µ]*)\s*$")
_PARSERS: dict[str, Callable[[object], Any]] = {
    "rate": parse_rate, "duration": parse_duration, "size": parse_size,
    "percentage": parse_percent}


def suggest_quantity(value: Any, what: str) -> str | None:
    """A corrected unit string that keeps the user's number, or None when there is no guess.

    value: what the spec gave (``"10 mbps"``, ``4000000``, ``"5 sec"``); what: ``rate``,
    ``duration``, ``size`` or ``percentage``.  ``"10 mbps"`` -> ``"10Mbit"``.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and what == "rate":
        guess = format_rate_exact(value) if value > 0 else None
    elif isinstance(value, (int, float, str)):
        m = _QUANTITY_RE.match(str(value))
        unit = _UNIT_GUESSES.get(what, {}).get(m.group("unit").lower()) if m else None
        guess = f"{m.group('num')}{unit}" if m and unit is not None else None
    else:
        return None
    if guess is None:
        return None
    try:
        _PARSERS[what](guess)
    except (UnitError, KeyError):
        return None
    return guess


def _quantity(parse: Callable[[object], Any], what: str, minimum: str,
              bounds: tuple[float, float, str] | None = None) -> Callable[[Any], Any]:
    """A before-validator: parse a unit string, refuse negatives (and zero when minimum='>0').

    bounds: (lowest, highest, "how to say the range") for a value with a tighter range
    than its unit allows (a link's rate, delay); zero is allowed below lowest when minimum
    allows it.
    """

    def check(value: Any) -> Any:
        if isinstance(value, str) and value.strip().startswith("-"):
            raise PydanticCustomError("negative", f"{value!r} is negative; a {what} must be >= 0")
        try:
            parsed = parse(value)
        except UnitError as exc:
            guess = suggest_quantity(value, what)
            text = (f"{show_value(value)} is not a {what}; did you mean {show_value(guess)}?"
                    if guess is not None else str(exc))
            raise PydanticCustomError("unit", text.replace("{", "(").replace("}", ")")) \
                from None
        if minimum == ">0" and parsed <= 0:
            raise PydanticCustomError("not_positive", f"{value!r} must be greater than zero")
        if bounds is not None:
            low, high, shown = bounds
            if parsed > high or (parsed and parsed < low):
                raise PydanticCustomError("out_of_range",
                                          f"{value!r} is out of range; use {shown}")
        return parsed

    return check


Rate = Annotated[int, BeforeValidator(_quantity(parse_rate, "rate", ">0")),
                 PlainSerializer(format_rate_exact, return_type=str, when_used="json")]
Duration = Annotated[float, BeforeValidator(_quantity(parse_duration, "duration", ">=0")),
                     PlainSerializer(format_duration_exact, return_type=str, when_used="json")]
PositiveDuration = Annotated[
    float, BeforeValidator(_quantity(parse_duration, "duration", ">0")),
    PlainSerializer(format_duration_exact, return_type=str, when_used="json")]
Size = Annotated[int, BeforeValidator(_quantity(parse_size, "size", ">0")),
                 PlainSerializer(format_size_exact, return_type=str, when_used="json")]
Percent = Annotated[float, BeforeValidator(_quantity(parse_percent, "percentage", ">=0")),
                    PlainSerializer(format_percent_exact, return_type=str, when_used="json")]

# A link's shape as the tc builders accept it (testbed.net.shaping.LinkShape): checked at load
# time, so that no schedule event fails mid-run.
LINK_RATE_BOUNDS = (1000, 10**10, "1kbit .. 10Gbit")
LINK_DELAY_BOUNDS = (0.0, 10.0, "0s .. 10s")
LinkRate = Annotated[int, BeforeValidator(_quantity(parse_rate, "rate", ">0",
                                                    LINK_RATE_BOUNDS)),
                     PlainSerializer(format_rate_exact, return_type=str, when_used="json")]
LinkDelay = Annotated[float, BeforeValidator(_quantity(parse_duration, "duration", ">=0",
                                                       LINK_DELAY_BOUNDS)),
                      PlainSerializer(format_duration_exact, return_type=str,
                                      when_used="json")]

NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$"
HOST_RE = r"^[A-Za-z][A-Za-z0-9_-]{0,9}$"
CC_RE = r"^[a-z][a-z0-9_]{0,15}$"
IFACE_RE = r"^[A-Za-z0-9_.-]{1,15}$"
PATH_RE = r"^[a-z][a-z0-9_]{0,15}$"  # as topologies.multipath accepts
Name = Annotated[str, Field(pattern=NAME_RE)]
HostName = Annotated[str, Field(pattern=HOST_RE)]
CCName = Annotated[str, Field(pattern=CC_RE)]
_PATTERN_WORDS = {
    NAME_RE: "use up to 32 letters, digits, '-' and '_', starting with a letter or digit",
    HOST_RE: "use up to 10 letters, digits, '-' and '_', starting with a letter",
    CC_RE: "use a kernel name in lower case, e.g. 'cubic' or 'reno'",
    PATH_RE: "use up to 16 lower-case letters, digits and '_', starting with a letter "
             "(e.g. 'wifi', 'lte')",
    IFACE_RE: "use an interface name such as 'client-eth0'",
}

# ---------------------------------------------------------------------------------------
# the models


class SpecModel(BaseModel):
    """Base of every spec table: frozen, unknown keys refused (see `unknown_key_hint`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    # Unknown keys are refused by pydantic itself (extra="forbid"), so that every problem
    # of a spec is reported at once; `unknown_key_hint` adds the did-you-mean hint.


class PathSpec(SpecModel):
    """One path of a multipath topology: a named, shaped link pair client <-> server."""

    name: Annotated[str, Field(pattern=PATH_RE)]
    bw: LinkRate | None = None
    delay: LinkDelay = 0.0
    jitter: LinkDelay = 0.0
    loss: Percent = 0.0
    queue: Annotated[int, Field(gt=0, le=100_000)] | None = None


class MultipathTopology(SpecModel):
    """Hosts ``client`` and ``server`` joined by several named, independently shaped paths."""

    kind: Literal["multipath"]
    paths: Annotated[list[PathSpec], Field(min_length=1, max_length=8)]
    server_multihomed: bool = False

    def host_names(self) -> list[str]:
        """The hosts this topology creates."""
        return ["client", "server"]

    def link_names(self) -> list[str]:
        """The names a schedule event may use in ``link``."""
        return [p.name for p in self.paths]


class FatTreeTopology(SpecModel):
    """A k-ary fat-tree: hosts S0.., edge E0.., aggregation A0.., core C0.. switches."""

    kind: Literal["fattree"]
    k: Annotated[int, Field(ge=2, le=8)] = 4
    bw: LinkRate | None = None
    delay: LinkDelay = 0.0
    loss: Percent = 0.0
    queue: Annotated[int, Field(gt=0, le=100_000)] | None = None

    @field_validator("k")
    @classmethod
    def _even_k(cls, k: int) -> int:
        if k % 2:
            raise PydanticCustomError("odd_k", f"{k} is odd; a fat-tree needs an even k "
                                      "(e.g. 4)")
        return k

    def host_names(self) -> list[str]:
        """The hosts this topology creates: S0 .. S(k^3/4 - 1)."""
        return [f"S{i}" for i in range(self.k ** 3 // 4)]

    def switch_names(self) -> list[str]:
        """Core, aggregation and edge switches."""
        k = self.k
        return ([f"C{i}" for i in range(k * k // 4)] + [f"A{i}" for i in range(k * k // 2)]
                + [f"E{i}" for i in range(k * k // 2)])

    def link_names(self) -> list[str] | None:
        """Links are named ``"X-Y"`` after their two nodes; checked against the topology."""
        return None


class CustomTopology(SpecModel):
    """A user-supplied Mininet ``Topo`` subclass given as ``"package.module:Class"``."""

    kind: Annotated[str, Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")]
    params: dict[str, Any] = Field(default_factory=dict)

    def host_names(self) -> list[str] | None:
        """Unknown until the class is built (the runner checks workloads then)."""
        return None

    def link_names(self) -> list[str] | None:
        """Unknown until the class is built."""
        return None


def _topology_tag(value: Any) -> str | None:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    if kind in ("multipath", "fattree"):
        return kind
    if isinstance(kind, str) and ":" in kind:
        return "custom"
    return None


TOPOLOGY_KINDS = "'multipath', 'fattree' or 'package.module:Class'"

Topology = Annotated[
    Union[Annotated[MultipathTopology, Tag("multipath")],  # noqa: UP007
          Annotated[FatTreeTopology, Tag("fattree")],
          Annotated[CustomTopology, Tag("custom")]],
    Discriminator(_topology_tag, custom_error_type="unknown_kind",
                  custom_error_message="unknown kind",
                  custom_error_context={"expected": TOPOLOGY_KINDS})]


class ScheduleEvent(SpecModel):
    """A change to one link at a time offset: down/up, or new bw/delay/jitter/loss."""

    at: Duration
    link: Annotated[str, Field(min_length=1)]
    down: bool | None = None
    bw: LinkRate | None = None
    delay: LinkDelay | None = None
    jitter: LinkDelay | None = None
    loss: Percent | None = None

    def changes(self) -> dict[str, Any]:
        """The keys this event changes, in base units (down, bw, delay, jitter, loss)."""
        return {k: v for k, v in self.model_dump(exclude={"at", "link"}).items()
                if v is not None}


class Controller(SpecModel):
    """The SDN controller (fat-tree only): one of `FABRIC_KINDS`; `NO_CONTROLLER` elsewhere
    (the kinds: `testbed.spec.controller_kinds`, the apps: `controllers.registry`)."""

    kind: Literal[CONTROLLER_KINDS] | None = None  # type: ignore[valid-type]


class Transport(SpecModel):
    """Host transport settings: TCP or MPTCP, congestion control, buffers, subflows."""

    protocol: Literal["tcp", "mptcp"] = "tcp"
    cc: CCName = "cubic"
    rmem: Size | None = None
    wmem: Size | None = None
    subflows: Annotated[int, Field(ge=1, le=8)] | None = None
    subflows_per_path: Annotated[int, Field(ge=1, le=4)] = 1
    scheduler: CCName | None = None
    sysctl: dict[str, str | int] = Field(default_factory=dict)

    @field_validator("sysctl")
    @classmethod
    def _sysctl_keys(cls, sysctl: dict[str, str | int]) -> dict[str, str | int]:
        from testbed.host.transport import check_sysctls  # the one definition of what is allowed

        try:
            check_sysctls(sysctl)
        except InputError as exc:
            # a field error, so that it is reported along with the spec's other problems
            reason = str(exc).removeprefix("transport.sysctl: ")
            raise PydanticCustomError("sysctl_key", "{reason}", {"reason": reason}) from None
        return sysctl


class _WorkloadBase(SpecModel):
    name: Name | None = None
    start: Duration = 0.0


class BulkWorkload(_WorkloadBase):
    """Bulk transfer(s) src -> dst of a size, for a duration, or until the run ends."""

    kind: Literal["bulk"]
    src: HostName
    dst: HostName
    size: Size | None = None
    duration: PositiveDuration | None = None
    parallel: Annotated[int, Field(ge=1, le=64)] = 1
    protocol: Literal["tcp", "mptcp"] | None = None
    cc: CCName | None = None
    via: Name | None = None


class FlowsWorkload(_WorkloadBase):
    """Many flows from a traffic pattern: incast, random pairs or a permutation."""

    kind: Literal["flows"]
    pattern: Literal["incast", "random", "permutation"]
    size: Size
    count: Annotated[int, Field(ge=0, le=10_000)] | None = None
    src: list[HostName] | None = None
    dst: HostName | None = None
    hosts: list[HostName] | None = None
    interval: Duration = 0.0
    seed: Annotated[int, Field(ge=0)] | None = None
    protocol: Literal["tcp", "mptcp"] | None = None
    cc: CCName | None = None


class CbrWorkload(_WorkloadBase):
    """Constant-bit-rate UDP traffic (cross traffic)."""

    kind: Literal["cbr"]
    src: HostName
    dst: HostName
    rate: Rate
    packet_size: Annotated[int, Field(ge=64, le=9000)] = 1000
    duration: PositiveDuration | None = None
    via: Name | None = None


class PingWorkload(_WorkloadBase):
    """ICMP echo requests src -> dst at an interval (RTT and loss per echo)."""

    kind: Literal["ping"]
    src: HostName
    dst: HostName
    interval: Annotated[float, BeforeValidator(_quantity(parse_duration, "duration", ">0")),
                        Field(ge=0.01),
                        PlainSerializer(format_duration_exact, return_type=str,
                                        when_used="json")] = 1.0
    count: Annotated[int, Field(ge=1)] | None = None
    size: Annotated[int, Field(ge=0, le=65000)] = 56
    duration: PositiveDuration | None = None
    via: Name | None = None


WORKLOAD_KINDS = "'bulk', 'flows', 'cbr' or 'ping'"

Workload = Annotated[Union[BulkWorkload, FlowsWorkload, CbrWorkload, PingWorkload],  # noqa: UP007
                     Field(discriminator="kind")]


class Capture(SpecModel):
    """Packet capture (tcpdump) on host interfaces."""

    enabled: bool = True
    snaplen: Annotated[int, Field(ge=64, le=262144)] = 128
    hosts: list[HostName] | None = None
    interfaces: list[Annotated[str, Field(pattern=IFACE_RE)]] | None = None


class Sampler(SpecModel):
    """Periodic ``ss`` sampling of cwnd, ssthresh and RTT per (sub)flow."""

    enabled: bool = True
    interval: Annotated[float, BeforeValidator(_quantity(parse_duration, "duration", ">0")),
                        Field(ge=0.01),
                        PlainSerializer(format_duration_exact, return_type=str,
                                        when_used="json")] = 0.1
    hosts: list[HostName] | None = None


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


# ---------------------------------------------------------------------------------------
# cross-field checks


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
    attempt(_check_repetition, exp)
    attempt(_check_controller, exp)
    names = [exp.workload_name(i) for i in range(len(exp.workload))]
    attempt(_no_duplicates, names, "workload", "name")
    for i, wl in enumerate(exp.workload):
        attempt(_check_workload, exp, i, wl, hosts)
    for i, ev in enumerate(exp.schedule):
        attempt(_check_event, exp, i, ev, links)
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


def _check_event(exp: Experiment, i: int, ev: ScheduleEvent, links: list[str] | None) -> None:
    topo = exp.topology
    where = f"schedule[{i}]"
    if not ev.changes():
        raise SpecError(f"{where}: changes nothing; give down = true/false or one of "
                        "bw, delay, jitter, loss")
    if ev.down is True and len(ev.changes()) > 1:
        raise SpecError(f"{where}.down: a link taken down cannot change bw/delay/jitter/"
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


def _check_workload(exp: Experiment, i: int, wl: Any, hosts: list[str] | None) -> None:
    where = f"workload[{i}]"
    if wl.start >= exp.duration:
        raise SpecError(f"{where}.start: {_fmt_d(wl.start)} is not before the end of the run "
                        f"(duration = {_fmt_d(exp.duration)})")
    via = getattr(wl, "via", None)
    if via is not None:
        if not isinstance(exp.topology, MultipathTopology):
            raise SpecError(f"{where}.via: pinning to a path needs topology.kind = "
                            "'multipath'")
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
    if isinstance(wl, BulkWorkload) and wl.size is not None and wl.duration is not None:
        raise SpecError(f"{where}.duration: give size or duration, not both")
    if isinstance(wl, FlowsWorkload):
        _check_flows(wl, where, hosts)
        return
    for key in ("src", "dst"):
        if hosts is not None:
            _check_host(getattr(wl, key), hosts, f"{where}.{key}")
    if wl.src == wl.dst:
        raise SpecError(f"{where}.dst: same host as src ({wl.src!r})")


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


# ---------------------------------------------------------------------------------------
# loading and error messages


def read_toml(path: Path) -> dict[str, Any]:
    """Read a TOML file into a dict; a missing file or bad syntax raises `SpecError`.

    path: the spec file.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: no such spec file") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot read the spec ({exc.__class__.__name__})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise SpecError(f"{path}: not valid TOML: nested too deeply") from None


def validate_spec(data: dict[str, Any], source: str = "spec",
                  labels: dict[str, str] | None = None) -> Experiment:
    """Validate a spec dict into an `Experiment`; raise a `SpecError` naming every problem.

    data: the parsed TOML; source: the file name that prefixes each problem's line;
    labels: key path as shown (``topology.paths[0].bw``) -> what to name instead of the
    file for problems at or under that key (``--set topology.paths.0.bw``).
    The error's message has one line per problem: ``<source>: <key path>: <what, hint>``.
    """
    try:
        return Experiment.model_validate(data)
    except ValidationError as exc:
        problems = validation_problems(exc, data)
        problems += [p for p in _cross_problems(exc, data) if p not in problems]
    except SpecError as exc:
        problems = str(exc).splitlines()
    raise SpecError("\n".join(_labelled(p, source, labels or {}) for p in problems)) \
        from None


def _labelled(problem: str, source: str, labels: dict[str, str]) -> str:
    """Prefix a ``key: text`` problem with the file, or with ``--set KEY`` when it set that key."""
    key, _, text = problem.partition(": ")
    for shown, label in labels.items():
        if key == shown:
            return f"{label}: {text}"
        if key.startswith((shown + ".", shown + "[")):
            return f"{label}: {problem}"
    return f"{source}: {problem}"


def _cross_problems(exc: ValidationError, data: dict[str, Any]) -> list[str]:
    """The cross-key problems of the spec once the keys with field errors are left out.

    Keys with errors are removed (unknown keys too) and the rest validated again, so that
    a wrong host name is reported along with a wrong unit. Nothing is added when a removed
    key was required, and problems under a table that lost a key are dropped (they could
    come from the removal itself).
    """
    pruned = copy.deepcopy(data)
    shadowed: set[str] = set()
    for err in exc.errors(include_url=False):
        parts = data_path(err["loc"], data)
        if err["type"] == "missing" or not parts or isinstance(parts[-1], int):
            return []
        node: Any = pruned
        for part in parts[:-1]:
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                return []
        if not isinstance(node, dict) or parts[-1] not in node:
            return []
        del node[parts[-1]]
        if err["type"] != "extra_forbidden":
            shadowed.add(_show_parts(parts[:-1]))
    try:
        Experiment.model_validate(pruned)
    except SpecError as cross:
        return [p for p in str(cross).splitlines()
                if not any(s and (p.startswith((s + ".", s + "[", s + ":"))) for s in shadowed)]
    except ValidationError:
        return []
    return []


def load_spec(path: Path) -> Experiment:
    """Read and validate a spec file without sweeping (the sweep table is kept as data)."""
    return validate_spec(read_toml(path), str(path))


def data_path(loc: tuple[Any, ...] | list[Any], data: Any) -> list[str | int]:
    """The keys and indices of a pydantic error location inside data, union tags dropped.

    loc: the error's ``loc``; data: the input it refers to (to tell keys from tags).
    """
    out: list[str | int] = []
    node = data
    for n, part in enumerate(loc):
        last = n == len(loc) - 1
        if isinstance(part, int):
            out.append(part)
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
            continue
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif not last and (node is None or isinstance(node, dict)):
            continue  # a union tag pydantic adds to the location, not a key
        else:
            node = None
        out.append(part)
    return out


def _show_parts(parts: list[str | int]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def dotted(loc: tuple[Any, ...] | list[Any], data: Any) -> str:
    """Turn a pydantic error location into ``a.b[1].c``, dropping union tags.

    loc: the error's ``loc``; data: the input it refers to (to tell keys from tags).
    """
    return _show_parts(data_path(loc, data))


def unknown_key_hint(loc: tuple[Any, ...] | list[Any], data: Any) -> str:
    """``did you mean 'delay'?`` (or the allowed keys) for an unknown key at loc.

    loc: the location of the unknown key (its last part); data: the validated input.
    """
    model = _model_at(data_path(loc, data)[:-1], data)
    if model is None:
        return "remove it"
    allowed = sorted(model.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    return f"did you mean {close[0]!r}?" if close else "allowed: " + ", ".join(allowed)


def _model_at(parts: list[str | int], data: Any) -> type[BaseModel] | None:
    """The spec model that validates the table at parts (keys/indices) of data."""
    tp: Any = Experiment
    node: Any = data
    for part in parts:
        tp = _resolve(tp, node)
        if isinstance(part, int):
            args = get_args(tp) if get_origin(tp) is list else ()
            if not args:
                return None
            tp = args[0]
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
        elif isinstance(tp, type) and issubclass(tp, BaseModel) and part in tp.model_fields:
            tp = tp.model_fields[part].annotation
            node = node.get(part) if isinstance(node, dict) else None
        else:
            return None
    tp = _resolve(tp, node)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _resolve(tp: Any, node: Any) -> Any:
    """Strip Annotated and Optional; pick a union's member by the table's ``kind``."""
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if get_origin(tp) in (Union, types.UnionType):
        members = [_resolve(m, node) for m in get_args(tp) if m is not type(None)]
        if len(members) == 1:
            return members[0]
        kind = node.get("kind") if isinstance(node, dict) else None
        for m in members:
            if isinstance(m, type) and issubclass(m, BaseModel) and "kind" in m.model_fields:
                ann = m.model_fields["kind"].annotation
                if get_origin(ann) is Literal and kind in get_args(ann):
                    return m
        if isinstance(kind, str) and ":" in kind:
            return CustomTopology
        return None
    return tp


def show_value(value: Any) -> str:
    """A short, TOML-like rendering of an offending input value."""
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value) if len(value) < 60 else json.dumps(value[:57] + "...")
    return repr(value)


_TYPE_WORDS = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "string_type": "a string", "list_type": "a list", "dict_type": "a table",
    "model_type": "a table", "model_attributes_type": "a table",
}


def validation_problems(exc: ValidationError, data: Any) -> list[str]:
    """One ``key path: what is wrong; hint`` line per error of a pydantic `ValidationError`.

    exc: the error; data: the dict that was validated. Duplicates are dropped.
    """
    out: list[str] = []
    for err in exc.errors(include_url=False):
        line = describe_error(err, data)
        if line not in out:
            out.append(line)
    return out


def describe_validation_error(exc: ValidationError, data: Any) -> str:
    """Every problem of a pydantic `ValidationError`, one line each (see `validation_problems`)."""
    return "\n".join(validation_problems(exc, data))


def suggest_name(value: Any, pattern: str) -> str | None:
    """value made to match pattern (spaces and other characters -> '-' or '_', lower case
    where required), or None when that does not work.  ``"my experiment"`` ->
    ``"my-experiment"``, path ``"WiFi"`` -> ``"wifi"``."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if pattern in (PATH_RE, CC_RE):
        text = re.sub(r"[^a-z0-9_]+", "_", text.lower())
    else:
        text = re.sub(r"[^A-Za-z0-9_-]+", "-", text)
    text = text.strip("-_")
    return text if text != value and re.fullmatch(pattern, text) else None


def _choice_hint(value: Any, expected: str) -> str:
    """``did you mean 'mptcp'?`` when value is close to one of the quoted choices, else
    ``use <expected>``."""
    choices = re.findall(r"'([^']*)'", expected)
    close = difflib.get_close_matches(value, choices, n=1) if isinstance(value, str) else []
    return f"did you mean {close[0]!r}?" if close else f"use {expected}"


def describe_error(err: Any, data: Any) -> str:
    """One line for one pydantic error (an item of ``exc.errors()``): key path and remedy.

    err: the error dict; data: the dict that was validated.
    """
    loc = list(err["loc"])
    etype = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    if etype == "extra_forbidden":
        return f"{dotted(loc, data)}: unknown key; {unknown_key_hint(loc, data)}"
    path = dotted(loc, data) or "(top level)"
    if etype == "missing":
        return f"{path}: missing; this key is required"
    if etype in ("union_tag_invalid", "union_tag_not_found", "unknown_kind"):
        expected = ctx.get("expected_tags") or ctx.get("expected") or WORKLOAD_KINDS
        kind = value.get("kind") if isinstance(value, dict) else None
        if path.endswith(".kind") or path == "kind":
            path = path.rsplit(".", 1)[0] if "." in path else ""
        prefix = f"{path}.kind" if path else "kind"
        if kind is None:
            return f"{prefix}: missing; use {expected}"
        return f"{prefix}: unknown kind {show_value(kind)}; {_choice_hint(kind, expected)}"
    if etype == "literal_error":
        return f"{path}: {show_value(value)} is not allowed; " \
               f"{_choice_hint(value, str(ctx.get('expected')))}"
    if etype == "string_pattern_mismatch":
        pattern = ctx.get("pattern", "")
        form = _PATTERN_WORDS.get(pattern, f"match {pattern}")
        guess = suggest_name(value, pattern)
        hint = f"did you mean {show_value(guess)}? ({form})" if guess else form
        return f"{path}: {show_value(value)} is not a valid name; {hint}"
    if etype in _TYPE_WORDS:
        return f"{path}: {show_value(value)} is not {_TYPE_WORDS[etype]}"
    if etype == "too_short":
        return f"{path}: needs at least {ctx.get('min_length')} entr" \
               f"{'y' if ctx.get('min_length') == 1 else 'ies'}"
    if etype == "too_long":
        return f"{path}: has more than the {ctx.get('max_length')} entries allowed"
    msg = err["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    if msg.startswith("Input should be"):
        msg = f"{show_value(value)} must be" + msg[len("Input should be"):]
    return f"{path}: {msg}"


def spec_to_data(exp: Experiment) -> dict[str, Any]:
    """The spec as plain TOML-ready data with unit strings; None values and defaults kept."""
    return _drop_none(exp.model_dump(mode="json"))


def _drop_none(value: Any) -> Any:
    """Drop None values and empty tables/lists; put ``kind`` first in every table."""
    if isinstance(value, dict):
        out = {k: v for k, v in ((k, _drop_none(v)) for k, v in value.items())
               if v is not None and v != {} and v != []}
        if "kind" in out:
            out = {"kind": out.pop("kind"), **out}
        return out
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def spec_to_toml(exp: Experiment, header: str = "") -> str:
    """The spec as TOML text (loads back into an equal `Experiment`).

    header: comment lines to put first (without the leading '#').
    """
    import tomli_w

    data = spec_to_data(exp)
    lines = "".join(f"# {line}\n" for line in header.splitlines()) if header else ""
    return lines + tomli_w.dumps(data)
