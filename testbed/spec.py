"""Experiment specs: pydantic models of the TOML file, loading, and readable errors.

A spec is pure data. `load_spec_file` reads TOML into a plain dict; `validate_spec` turns
a dict into a frozen `Experiment` (unknown keys forbidden). Quantities are written with
units (``"4Mbit"``, ``"25us"``, ``"64KiB"``, ``"0.5%"``) and stored in base units
(bit/s, seconds, bytes, percentage points); dumping with ``mode="json"`` writes the unit
strings back, exactly.

Every mistake raises `SpecError` with one line naming the file, the dotted key path and
the expected form, e.g.::

    spec.toml: topology.paths[1].bw: '4Mbps' is not a rate; use e.g. '4Mbit'

The full key reference is ``docs/spec.md``. Sweeps, overrides, seeds and run ids live in
`testbed.sweep`.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PlainSerializer,
    Tag,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from testbed.compat import tomllib
from testbed.errors import InputError, SpecError, UnitError
from testbed.units import parse_duration, parse_percent, parse_rate, parse_size

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
            raise PydanticCustomError("unit", str(exc).replace("{", "(").replace("}", ")")) \
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

# A link's shape as the tc builders accept it (testbed.shaping.LinkShape): checked at load
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
    """Base of every spec table: frozen, unknown keys refused with a did-you-mean hint."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            allowed = set(cls.model_fields)
            for key in data:
                if key not in allowed:
                    close = difflib.get_close_matches(str(key), sorted(allowed), n=1)
                    hint = (f"did you mean '{close[0]}'?" if close
                            else "allowed: " + ", ".join(sorted(allowed)))
                    raise PydanticCustomError("unknown_key", "unknown key; {hint}",
                                              {"key": str(key), "hint": hint})
        return data


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

    @model_validator(mode="after")
    def _even_k(self) -> FatTreeTopology:
        if self.k % 2:
            raise SpecError(f"topology.k: {self.k} is odd; a fat-tree needs an even k "
                            f"(e.g. 4)")
        return self

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
    """The SDN controller (fat-tree only): single-path | ecmp | spray; none elsewhere."""

    kind: Literal["none", "single-path", "ecmp", "spray"] | None = None


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

    @model_validator(mode="after")
    def _sysctl_keys(self) -> Transport:
        from testbed.transport import check_sysctls  # the one definition of what is allowed

        try:
            check_sysctls(self.sysctl)
        except InputError as exc:
            raise SpecError(str(exc)) from None
        return self


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
    """Checks that involve several keys; raise `SpecError` naming the offending key.

    exp: a spec whose fields each validated on their own.
    """
    topo = exp.topology
    hosts = topo.host_names()
    links = topo.link_names()
    if isinstance(topo, MultipathTopology):
        _no_duplicates([p.name for p in topo.paths], "topology.paths", "name")
    if exp.repetition is not None and exp.repetitions != 1:
        raise SpecError("repetition: set either repetitions (how many) or repetition "
                        "(just this one), not both")

    kind = exp.controller.kind
    if kind not in (None, "none") and not isinstance(topo, FatTreeTopology):
        raise SpecError(f"controller.kind: '{kind}' needs topology.kind = 'fattree'; "
                        f"use 'none' (or leave [controller] out) for {topo.kind!r}")
    if kind == "none" and isinstance(topo, FatTreeTopology):
        raise SpecError("controller.kind: a fat-tree needs a controller; use "
                        "'single-path', 'ecmp' or 'spray'")

    names = [exp.workload_name(i) for i in range(len(exp.workload))]
    _no_duplicates(names, "workload", "name")
    for i, wl in enumerate(exp.workload):
        _check_workload(exp, i, wl, hosts)

    for i, ev in enumerate(exp.schedule):
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
            raise SpecError(f"{where}.link: no link named {ev.link!r}; the paths are "
                            + ", ".join(repr(x) for x in links))
        if isinstance(topo, FatTreeTopology):
            _check_fattree_link(topo, ev.link, f"{where}.link")

    if hosts is not None:
        for key, listed in (("capture.hosts", exp.capture.hosts),
                            ("sampler.hosts", exp.sampler.hosts)):
            for j, h in enumerate(listed or []):
                _check_host(h, hosts, f"{key}[{j}]")


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
            raise SpecError(f"{where}.via: no path named {via!r}; the paths are "
                            + ", ".join(repr(x) for x in exp.topology.link_names()))
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


def validate_spec(data: dict[str, Any], source: str = "spec") -> Experiment:
    """Validate a spec dict into an `Experiment`, raising a one-line `SpecError`.

    data: the parsed TOML; source: the file name used as the message prefix.
    """
    try:
        return Experiment.model_validate(data)
    except ValidationError as exc:
        raise SpecError(f"{source}: {describe_validation_error(exc, data)}") from None
    except SpecError as exc:
        raise SpecError(f"{source}: {exc}") from None


def load_spec(path: Path) -> Experiment:
    """Read and validate a spec file without sweeping (the sweep table is kept as data)."""
    return validate_spec(read_toml(path), str(path))


def dotted(loc: tuple[Any, ...] | list[Any], data: Any) -> str:
    """Turn a pydantic error location into ``a.b[1].c``, dropping union tags.

    loc: the error's ``loc``; data: the input it refers to (to tell keys from tags).
    """
    out = ""
    node = data
    for n, part in enumerate(loc):
        last = n == len(loc) - 1
        if isinstance(part, int):
            out += f"[{part}]"
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
            continue
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif not last and (node is None or isinstance(node, dict)):
            continue  # a union tag pydantic adds to the location, not a key
        else:
            node = None
        out += f".{part}" if out else str(part)
    return out


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


def describe_validation_error(exc: ValidationError, data: Any) -> str:
    """One line for the first error of a pydantic `ValidationError`: key path and remedy.

    exc: the error; data: the dict that was validated.
    """
    errors = exc.errors(include_url=False)
    err = errors[0]
    loc = list(err["loc"])
    etype = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" \
        if len(errors) > 1 else ""
    if etype == "unknown_key":
        return f"{dotted([*loc, ctx['key']], data)}: unknown key; {ctx['hint']}{more}"
    path = dotted(loc, data) or "(top level)"
    if etype == "missing":
        return f"{path}: missing; this key is required{more}"
    if etype in ("union_tag_invalid", "union_tag_not_found", "unknown_kind"):
        expected = ctx.get("expected_tags") or ctx.get("expected") or WORKLOAD_KINDS
        kind = value.get("kind") if isinstance(value, dict) else None
        if path.endswith(".kind") or path == "kind":
            path = path.rsplit(".", 1)[0] if "." in path else ""
        prefix = f"{path}.kind" if path else "kind"
        if kind is None:
            return f"{prefix}: missing; use {expected}{more}"
        return f"{prefix}: unknown kind {show_value(kind)}; use {expected}{more}"
    if etype == "literal_error":
        return f"{path}: {show_value(value)} is not allowed; use {ctx.get('expected')}{more}"
    if etype == "string_pattern_mismatch":
        form = _PATTERN_WORDS.get(ctx.get("pattern", ""), f"match {ctx.get('pattern')}")
        return f"{path}: {show_value(value)} is not a valid name; {form}{more}"
    if etype in _TYPE_WORDS:
        return f"{path}: {show_value(value)} is not {_TYPE_WORDS[etype]}{more}"
    if etype == "too_short":
        return f"{path}: needs at least {ctx.get('min_length')} entr" \
               f"{'y' if ctx.get('min_length') == 1 else 'ies'}{more}"
    if etype == "too_long":
        return f"{path}: has more than the {ctx.get('max_length')} entries allowed{more}"
    msg = err["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    if msg.startswith("Input should be"):
        msg = f"{show_value(value)} must be" + msg[len("Input should be"):]
    return f"{path}: {msg}{more}"


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
