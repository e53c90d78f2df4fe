"""Experiment specs: the pydantic models of the TOML file, frozen and in base units.

Each table of a spec is a `SpecModel` (frozen, unknown keys refused); `Experiment` is the
whole file.  Quantities are the unit-bearing types of `testbed.spec.quantities`; checks
that involve several keys run when an `Experiment` validates (`testbed.spec.experiment`).
Reading a file, turning validation errors into one line per problem, and dumping back
to TOML live in `testbed.spec.load` and `testbed.spec.problems`.  The full key reference
is ``docs/spec.md``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from testbed.core.errors import InputError
from testbed.spec.controller_kinds import CONTROLLER_KINDS
from testbed.spec.linkshape import DEFAULT_QUEUE_PKTS, DISTRIBUTIONS, GilbertElliott, LinkShape
from testbed.spec.profile import DEFAULT_PROFILE, PROFILE_NAMES, profile_named
from testbed.spec.quantities import (
    BufferSize,
    Duration,
    Interval,
    LinkDelay,
    LinkRate,
    Percent,
    PositiveDuration,
    Rate,
    Size,
)
from testbed.spec.sysctl import check_sysctls

NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$"
HOST_RE = r"^[A-Za-z][A-Za-z0-9_-]{0,9}$"
CC_RE = r"^[a-z][a-z0-9_]{0,15}$"
IFACE_RE = r"^[A-Za-z0-9_.-]{1,15}$"
PATH_RE = r"^[a-z][a-z0-9_]{0,15}$"
Name = Annotated[str, Field(pattern=NAME_RE)]
HostName = Annotated[str, Field(pattern=HOST_RE)]
CCName = Annotated[str, Field(pattern=CC_RE)]
# coupled MPTCP congestion controls the testbed provides as BPF programs (MPTCP only)
COUPLED_CCS = ("lia", "olia", "balia", "wvegas")
# P3's hand-over schemes (transport.handover) -> the BPF NewReno variant that runs each
HANDOVER_CCS = {"immediate-expiration": "reno_ie", "bandwidth-aware": "reno_bwa"}
# every congestion control the testbed itself provides as a BPF struct_ops program
BPF_CCS = (*COUPLED_CCS, *HANDOVER_CCS.values())
# what a name must look like, by its pattern (CC_RE and PATH_RE are one pattern: a key's
# own words, KEY_WORDS, come first)
PATTERN_WORDS = {
    NAME_RE: "use up to 32 letters, digits, '-' and '_', starting with a letter or digit",
    HOST_RE: "use up to 10 letters, digits, '-' and '_', starting with a letter",
    PATH_RE: "use up to 16 lower-case letters, digits and '_', starting with a letter "
             "(e.g. 'wifi', 'lte')",
    IFACE_RE: "use an interface name such as 'client-eth0'",
}
KEY_WORDS = {
    "cc": "use a kernel name in lower case, e.g. 'cubic' or 'reno'",
    "scheduler": "use a kernel name in lower case, e.g. 'default'",
}


class SpecModel(BaseModel):
    """Base of every spec table: frozen, unknown keys refused (see `unknown_key_hint`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, strict=True)

    # Unknown keys are refused by pydantic itself (extra="forbid"), so that every problem
    # of a spec is reported at once; `unknown_key_hint` adds the did-you-mean hint.


def _link_shape(bw: int | None, delay: float, jitter: float, loss: float,
                queue: int | None) -> LinkShape:
    return LinkShape(bw_bps=bw, delay_s=delay, jitter_s=jitter, loss_pct=loss,
                     queue_pkts=DEFAULT_QUEUE_PKTS if queue is None else queue)


class GilbertElliottSpec(SpecModel):
    """A path's ``ge`` table: Gilbert-Elliott loss (`GilbertElliott`, netem ``gemodel``).

    p: chance per packet to move good -> bad; r: bad -> good; bad_loss: loss in the bad
    state (default 100 %); good_loss: loss in the good state (default 0 %).
    """

    p: Percent
    r: Percent
    bad_loss: Percent = 100.0
    good_loss: Percent = 0.0

    @property
    def model(self) -> GilbertElliott:
        """The `GilbertElliott` loss model of `LinkShape`."""
        return GilbertElliott(p_pct=self.p, r_pct=self.r, bad_loss_pct=self.bad_loss,
                              good_loss_pct=self.good_loss)


class PathSpec(SpecModel):
    """One path of a multipath topology: a named, shaped link pair client <-> server.

    The one path type: `topologies.multipath.MultiHomedTopo` builds from it.  name: the
    path's name (``wifi``); bw (bit/s, None: unlimited), delay, jitter (s), loss (%),
    queue (packets, None: `DEFAULT_QUEUE_PKTS`): its shape, in each direction;
    distribution: the jitter's distribution (None: uniform); reorder: False keeps packets
    in order under jitter; ge: Gilbert-Elliott loss instead of random ``loss``.  The
    checks between keys (distribution and reorder need jitter, ge refuses loss) run in
    `testbed.spec.experiment`, so that they are reported with the spec's other problems.
    """

    name: Annotated[str, Field(pattern=PATH_RE)]
    bw: LinkRate | None = None
    delay: LinkDelay = 0.0
    jitter: LinkDelay = 0.0
    distribution: Literal[DISTRIBUTIONS] | None = None  # type: ignore[valid-type]
    reorder: bool = True
    loss: Percent = 0.0
    ge: GilbertElliottSpec | None = None
    queue: Annotated[int, Field(gt=0, le=100_000)] | None = None

    @property
    def shape(self) -> LinkShape:
        """The path's `LinkShape` (each direction)."""
        return _link_shape(self.bw, self.delay, self.jitter, self.loss, self.queue).changed(
            jitter_distribution=self.distribution, jitter_reorder=self.reorder,
            loss_model=None if self.ge is None else self.ge.model)


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

    @property
    def shape(self) -> LinkShape | None:
        """The `LinkShape` of every link, or None when no key shapes them."""
        if self.bw is None and not self.delay and not self.loss and self.queue is None:
            return None
        return _link_shape(self.bw, self.delay, 0.0, self.loss, self.queue)

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
    """A change to one link at a time offset: down/up, or new bw/delay/jitter/loss.

    The one event type: a spec's ``[[schedule]]`` entries (a ``trace`` entry expands into
    one per row of its file, `testbed.spec.trace`) and presets yield it, and the network
    plays it (`testbed.net.schedule.SchedulePlayer`, ``Network.apply``).  at: seconds after
    the run's origin; link: the link's name; down: True takes the link down, False brings
    it back; up: the same the other way round (give one of them, see `link_up`); bw
    (bit/s), delay, jitter (s), loss (%): new values, None keeps the link's (and a
    path's distribution, reorder and ge always stay).
    """

    # an entry with ``trace`` is expanded before it validates (`testbed.spec.trace`); named
    # here so that an unknown key's hint offers it
    other_keys: ClassVar[tuple[str, ...]] = ("trace",)

    at: Duration
    link: Annotated[str, Field(min_length=1)]
    down: bool | None = None
    up: bool | None = None
    bw: LinkRate | None = None
    delay: LinkDelay | None = None
    jitter: LinkDelay | None = None
    loss: Percent | None = None

    def changes(self) -> dict[str, Any]:
        """The keys this event sets, in base units (down, up, bw, delay, jitter, loss)."""
        return {k: v for k, v in self.model_dump(exclude={"at", "link"}).items()
                if v is not None}

    @property
    def link_up(self) -> bool | None:
        """False: the link goes down; True: it comes back (after the shape changes); None:
        its state stays.  From ``up``, else from ``down`` (both at once is refused when a
        spec is checked, `testbed.spec.experiment`)."""
        if self.up is not None:
            return self.up
        return None if self.down is None else not self.down

    def shape_changes(self) -> dict[str, int | float]:
        """The `LinkShape` fields this event sets (bw_bps, delay_s, jitter_s, loss_pct)."""
        fields = {"bw_bps": self.bw, "delay_s": self.delay, "jitter_s": self.jitter,
                  "loss_pct": self.loss}
        return {k: v for k, v in fields.items() if v is not None}

    def apply_to(self, shape: LinkShape) -> LinkShape:
        """shape with this event's values (shape itself when it changes none); the fields
        an event has no key for (distribution, reorder, Gilbert-Elliott loss, queue)
        stay as they are."""
        changes = self.shape_changes()
        return shape.changed(**changes) if changes else shape

    def as_record(self) -> dict[str, int | float | bool]:
        """The change in base units for ``events.jsonl``: bw_bps, delay_s, jitter_s,
        loss_pct and up, those it sets."""
        record: dict[str, int | float | bool] = dict(self.shape_changes())
        if self.link_up is not None:
            record["up"] = self.link_up
        return record


class Controller(SpecModel):
    """The SDN controller (fat-tree only): one of `FABRIC_KINDS`; `NO_CONTROLLER` elsewhere
    (the kinds: `testbed.spec.controller_kinds`, the apps: `controllers.registry`)."""

    kind: Literal[CONTROLLER_KINDS] | None = None  # type: ignore[valid-type]


class Transport(SpecModel):
    """Host transport settings: TCP or MPTCP, congestion control, buffers, subflows.

    profile: a named set of host TCP settings (`testbed.spec.profile`); a profile that
    requires a congestion control (``tcp-2006``: reno) makes it the default of ``cc``
    when the spec leaves ``cc`` out (another ``cc`` is refused in
    `testbed.spec.experiment`, with the spec's other problems).
    """

    protocol: Literal["tcp", "mptcp"] = "tcp"
    profile: Literal[PROFILE_NAMES] = DEFAULT_PROFILE  # type: ignore[valid-type]
    cc: CCName = "cubic"
    rmem: BufferSize | None = None
    wmem: BufferSize | None = None
    subflows: Annotated[int, Field(ge=1, le=8)] | None = None
    subflows_per_path: Annotated[int, Field(ge=1, le=4)] = 1
    scheduler: CCName | None = None
    sysctl: dict[str, str | int] = Field(default_factory=dict)
    handover: Literal["none", "immediate-expiration", "bandwidth-aware"] = "none"
    keep_neighbours: bool = False

    def kernel_cc(self) -> str:
        """The congestion control the hosts run: ``cc``, or the BPF NewReno variant of a
        hand-over scheme (`HANDOVER_CCS`)."""
        return HANDOVER_CCS.get(self.handover, self.cc)

    @field_validator("sysctl", mode="before")
    @classmethod
    def _sysctl_keys(cls, sysctl: Any) -> Any:
        if not isinstance(sysctl, dict):
            return sysctl  # the type's own error
        try:
            check_sysctls(sysctl)
        except InputError as exc:
            # a field error, so that it is reported along with the spec's other problems
            reason = str(exc).removeprefix("transport.sysctl: ").removeprefix(
                "transport.sysctl.")
            raise PydanticCustomError("sysctl_key", "{reason}", {"reason": reason}) from None
        return sysctl

    @model_validator(mode="before")
    @classmethod
    def _profile_cc(cls, data: Any) -> Any:
        """Without a ``cc``, a profile's required congestion control is the default."""
        if isinstance(data, dict) and "cc" not in data and data.get("profile") in PROFILE_NAMES:
            cc = profile_named(data["profile"]).cc
            if cc is not None:
                return {**data, "cc": cc}
        return data


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
    interval: Interval = 1.0
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
    interval: Interval = 0.1
    hosts: list[HostName] | None = None
