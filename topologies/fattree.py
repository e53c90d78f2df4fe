"""The k-ary fat-tree of P1 (Al-Fares et al. style), as a pure layout and a Mininet topology.

A k-ary fat-tree (k even, k >= 2) has k pods; each pod holds k/2 edge and k/2 aggregation
switches; (k/2)^2 core switches sit on top and every edge switch serves k/2 hosts.
k=4 gives 4 core, 8 aggregation, 8 edge switches, 16 hosts and 48 links.

Names (those of P1)
    core ``C0..C{(k/2)^2-1}``, aggregation ``A0..A{k^2/2-1}``, edge ``E0..E{k^2/2-1}``,
    hosts ``S0..S{k^3/4-1}``.  Aggregation and edge switches are numbered pod by pod
    (pod p holds ``A{p*k/2 + j}`` and ``E{p*k/2 + e}``); hosts edge by edge.

DPIDs (deterministic, ``level << 16 | index``)
    edge ``0x1_0000 + i``, aggregation ``0x2_0000 + i``, core ``0x3_0000 + i``
    (E0 = ``0000000000010000``, A0 = ``0000000000020000``, C0 = ``0000000000030000``).

Ports (deterministic; Mininet names the interface ``<switch>-eth<port>``)
    - edge ``E(p,e)``: ports ``1..k/2`` are DOWN, port ``h+1`` to its h-th host;
      ports ``k/2+1..k`` are UP, port ``k/2+1+j`` to aggregation ``A(p,j)``.
    - aggregation ``A(p,j)``: ports ``1..k/2`` are DOWN, port ``e+1`` to edge ``E(p,e)``;
      ports ``k/2+1..k`` are UP, port ``k/2+1+m`` to core ``C(j*k/2 + m)``.
    - core ``C(c)``: ports ``1..k`` are DOWN, port ``p+1`` to pod p
      (aggregation ``A(p, c // (k/2))``).
    - hosts have one interface, ``eth0``.

Addresses
    host ``S(i)`` in pod p, edge e (within the pod), slot h: IPv4 ``10.p.e.(h+2)/8``
    (one flat /8, so hosts ARP for each other directly) and MAC ``00:00:00:00:00:01`` + i.

Link parameters per layer
    Links belong to one of three layers, ``host_edge``, ``edge_agg`` and ``agg_core``; the
    Mininet link options (``bw`` in Mbit/s, ``delay`` such as ``"25us"``,
    ``max_queue_size`` in packets, ``loss`` in percent) can be given for all links at once
    and overridden per layer.

Usable from Mininet directly::

    mn --custom topologies/fattree.py --topo fattree,4 --controller remote,port=6653
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mininet.topo import Topo

try:
    from testbed.core.errors import InputError
    from testbed.spec.linkshape import LinkShape, mininet_params
except ImportError:  # loaded by `mn --custom` with a Python that lacks the project on its path
    sys.path.insert(0, str(Path(inspect.getfile(inspect.currentframe())).resolve().parents[1]))
    from testbed.core.errors import InputError
    from testbed.spec.linkshape import LinkShape, mininet_params

EDGE, AGGREGATION, CORE = 1, 2, 3
LEVEL_PREFIX = {EDGE: "E", AGGREGATION: "A", CORE: "C"}
LAYERS = ("host_edge", "edge_agg", "agg_core")
LINK_OPTIONS = ("bw", "delay", "jitter", "loss", "max_queue_size")


class TopologyError(InputError):
    """A topology cannot be built from the given parameters (e.g. an odd fat-tree arity)."""


@dataclass(frozen=True)
class SwitchInfo:
    """One switch of a layered fabric.

    name: Mininet name; dpid: OpenFlow datapath id; level: 1 edge, 2 aggregation, 3 core;
    pod: pod number (None for core switches); index: position within its level.
    """

    name: str
    dpid: int
    level: int
    pod: int | None
    index: int

    @property
    def dpid_str(self) -> str:
        """The DPID as the 16-hex-digit string Mininet and OVS use."""
        return f"{self.dpid:016x}"


@dataclass(frozen=True)
class HostInfo:
    """One host: name, IPv4 address (no prefix), prefix length, MAC, attached switch and port."""

    name: str
    ip: str
    prefixlen: int
    mac: str
    switch: str
    port: int


@dataclass(frozen=True)
class LinkInfo:
    """One link from a lower node to an upper node.

    lower/lower_port: the host or switch below (hosts use port 0 = eth0);
    upper/upper_port: the switch above; layer: ``host_edge``, ``edge_agg`` or ``agg_core``.
    """

    lower: str
    lower_port: int
    upper: str
    upper_port: int
    layer: str


@dataclass(frozen=True)
class FabricLayout:
    """A layered switch fabric as pure data: what controllers need instead of LLDP discovery.

    kind: e.g. ``"fattree"``; k: arity; switches, hosts, links: the elements.
    """

    kind: str
    k: int
    switches: tuple[SwitchInfo, ...]
    hosts: tuple[HostInfo, ...]
    links: tuple[LinkInfo, ...]

    def switch(self, name: str) -> SwitchInfo:
        """The switch called name (KeyError if there is none)."""
        for sw in self.switches:
            if sw.name == name:
                return sw
        raise KeyError(name)

    def by_dpid(self) -> dict[int, SwitchInfo]:
        """Switches keyed by DPID."""
        return {sw.dpid: sw for sw in self.switches}

    def up_ports(self, name: str) -> list[int]:
        """Ports of switch name that lead one level up (sorted)."""
        return sorted(ln.lower_port for ln in self.links if ln.lower == name)

    def down_ports(self, name: str) -> list[int]:
        """Ports of switch name that lead one level down, to switches or hosts (sorted)."""
        return sorted(ln.upper_port for ln in self.links if ln.upper == name)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (inverse of `from_dict`)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FabricLayout:
        """Rebuild a layout from `to_dict` output.

        data: the dict; raises `TopologyError` when keys are missing or malformed.
        """
        try:
            return cls(kind=str(data["kind"]), k=int(data["k"]),
                       switches=tuple(SwitchInfo(**s) for s in data["switches"]),
                       hosts=tuple(HostInfo(**h) for h in data["hosts"]),
                       links=tuple(LinkInfo(**ln) for ln in data["links"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise TopologyError(f"layout description is malformed ({exc!r}); write it with "
                                "FabricLayout.to_dict()") from exc


def check_arity(k: Any) -> int:
    """Return k as an int if it is a valid fat-tree arity, else raise `TopologyError`.

    k: the number of ports per switch (even, >= 2).
    """
    try:
        kk = int(k)
    except (TypeError, ValueError):
        kk = None
    if kk is None or kk != k or isinstance(k, bool):
        raise TopologyError(f"fattree k={k!r} is not an integer; use an even k >= 2, e.g. k=4")
    if kk < 2 or kk % 2:
        raise TopologyError(f"fattree k={kk} is invalid: k must be even and >= 2 (e.g. 4)")
    if kk > 254:
        raise TopologyError(f"fattree k={kk} is too large for 10.p.e.h addresses; use k <= 254")
    return kk


def host_mac(i: int) -> str:
    """MAC address of host number i (``00:00:00:00:00:01`` for S0)."""
    v = i + 1
    return ":".join(f"{(v >> s) & 0xFF:02x}" for s in range(40, -1, -8))


def fattree_layout(k: int = 4) -> FabricLayout:
    """The pure description of a k-ary fat-tree: names, DPIDs, ports, addresses, links.

    k: arity, even and >= 2; raises `TopologyError` otherwise.
    """
    k = check_arity(k)
    half = k // 2
    switches: list[SwitchInfo] = []
    hosts: list[HostInfo] = []
    links: list[LinkInfo] = []

    def add_switch(level: int, index: int, pod: int | None) -> str:
        name = f"{LEVEL_PREFIX[level]}{index}"
        switches.append(SwitchInfo(name, (level << 16) | index, level, pod, index))
        return name

    for c in range(half * half):
        add_switch(CORE, c, None)
    for p in range(k):
        for j in range(half):
            add_switch(AGGREGATION, p * half + j, p)
    for p in range(k):
        for e in range(half):
            edge = add_switch(EDGE, p * half + e, p)
            for h in range(half):
                i = (p * half + e) * half + h
                name = f"S{i}"
                hosts.append(HostInfo(name, f"10.{p}.{e}.{h + 2}", 8, host_mac(i), edge, h + 1))
                links.append(LinkInfo(name, 0, edge, h + 1, "host_edge"))
    for p in range(k):
        for e in range(half):
            for j in range(half):
                links.append(LinkInfo(f"E{p * half + e}", half + 1 + j,
                                      f"A{p * half + j}", e + 1, "edge_agg"))
    for p in range(k):
        for j in range(half):
            for m in range(half):
                links.append(LinkInfo(f"A{p * half + j}", half + 1 + m,
                                      f"C{j * half + m}", p + 1, "agg_core"))
    return FabricLayout("fattree", k, tuple(switches), tuple(hosts), tuple(links))


def layer_link_options(defaults: Mapping[str, Any] | None,
                       per_layer: Mapping[str, Mapping[str, Any]] | None) -> dict[str, dict]:
    """Mininet link options for each layer: defaults overridden by per_layer entries.

    defaults: options for every link; per_layer: ``{layer: {option: value}}``.
    Raises `TopologyError` for an unknown layer or option.
    """
    per_layer = per_layer or {}
    for layer, opts in per_layer.items():
        if layer not in LAYERS:
            raise TopologyError(f"fattree link layer {layer!r} is unknown; use one of "
                                f"{', '.join(LAYERS)}")
        bad = sorted(set(opts) - set(LINK_OPTIONS))
        if bad:
            raise TopologyError(f"fattree link option {bad[0]!r} (layer {layer}) is unknown; "
                                f"use {', '.join(LINK_OPTIONS)}")
    base = {key: val for key, val in (defaults or {}).items() if val is not None}
    return {layer: {**base, **dict(per_layer.get(layer, {}))} for layer in LAYERS}


class FatTreeTopo(Topo):
    """Mininet topology for a k-ary fat-tree (see the module docstring for names and ports).

    k: arity (even, >= 2); shape: the `LinkShape` of every link (what a spec gives, see
    `testbed.spec.model.FatTreeTopology.shape`); or else bw, delay, jitter, loss,
    max_queue_size: Mininet link options for every link (None = unset) and layers:
    per-layer overrides ``{"agg_core": {"bw": 10}}``.
    """

    def build(self, k: int = 4, bw: float | None = None, delay: str | None = None,
              jitter: str | None = None, loss: float | None = None,
              max_queue_size: int | None = None,
              layers: Mapping[str, Mapping[str, Any]] | None = None,
              shape: LinkShape | None = None, **_opts: Any) -> None:
        self.layout = fattree_layout(k)
        mininet = dict(bw=bw, delay=delay, jitter=jitter, loss=loss,
                       max_queue_size=max_queue_size)
        if shape is None:
            options = layer_link_options(mininet, layers)
        elif layers or any(v is not None for v in mininet.values()):
            raise TopologyError("fattree: give either a shape or Mininet link options, "
                                "not both")
        else:  # TCLink-style keys too, so `mn --link tc` shapes it similarly
            options = {layer: {"shape": shape, **mininet_params(shape)} for layer in LAYERS}
        for sw in self.layout.switches:
            self.addSwitch(sw.name, dpid=sw.dpid_str)
        for host in self.layout.hosts:
            self.addHost(host.name, ip=f"{host.ip}/{host.prefixlen}", mac=host.mac)
        for ln in self.layout.links:
            self.addLink(ln.lower, ln.upper, port1=ln.lower_port, port2=ln.upper_port,
                         **options[ln.layer])


topos = {"fattree": FatTreeTopo}
