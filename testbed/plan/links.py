"""The links of a topology as the testbed shapes and names them (pure: a Mininet `Topo` in,
values out; no root, no network).

A topology link is shaped when its options carry ``shape`` (a `LinkShape`) or
TCLink-style ``bw``/``delay``/``jitter``/``loss``/``max_queue_size``.  The shape goes on
the egress of both ends, or of the nodes listed in ``shape_ends``.  Links are grouped by
their ``link_name`` option (default ``"<node1>-<node2>"``) into a `NamedLink`, the name
schedule events address.  ``down``/``up`` act on the root-namespace end of each link of
the group when there is one (a host-side admin-down would flush the host's routes).
Links carrying a ``path`` option make up a named path (`path_interfaces`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from testbed.core.errors import InputError
from testbed.spec.linkshape import LinkShape, shape_from_mininet_params

if TYPE_CHECKING:
    from mininet.topo import Topo


@dataclass(frozen=True)
class Egress:
    """One shaped direction: the egress of ``intf`` on ``node``."""

    node: str
    intf: str
    in_namespace: bool

    @property
    def namespace(self) -> str:
        """The node whose namespace holds the interface; "" for the root namespace."""
        return self.node if self.in_namespace else ""


@dataclass
class NamedLink:
    """A link (or group of links) that schedule events address by name."""

    name: str
    shape: LinkShape
    egress: list[Egress]
    updown: list[Egress]
    up: bool = True


@dataclass(frozen=True)
class PathInterface:
    """An interface on a named path: node, name, address, host_side (in a host)."""

    node: str
    intf: str
    addr: str | None
    host_side: bool


class PlannedLink(NamedTuple):
    """A topology link as Mininet will make it: its nodes, interface names and options."""

    node1: str
    node2: str
    intf1: str
    intf2: str
    info: dict[str, Any]  # the topology's link options (Mininet's ``linkInfo``)


def intf_name(node: str, port: int | None, explicit: str | None) -> str:
    """The name Mininet gives a link end: explicit, else ``<node>-eth<port>``."""
    if explicit:
        return explicit
    if port is None:
        raise InputError(f"link end on {node!r} has no port number; build the topology "
                         "with Topo.addLink")
    return f"{node}-eth{port}"


def planned_links(topo: Topo) -> list[PlannedLink]:
    """(node1, node2, intf1, intf2, options) for each topology link, in Mininet's order."""
    out = []
    for _n1, _n2, info in topo.links(sort=True, withInfo=True):
        out.append(PlannedLink(
            info["node1"], info["node2"],
            intf_name(info["node1"], info.get("port1"), info.get("intfName1")),
            intf_name(info["node2"], info.get("port2"), info.get("intfName2")),
            info))
    return out


def link_groups(topo: Topo) -> dict[str, NamedLink]:
    """The shaped links of a topology, grouped by name, with their egress points."""
    switches = set(topo.switches())
    groups: dict[str, NamedLink] = {}
    for n1, n2, i1, i2, info in planned_links(topo):
        shape = shape_from_mininet_params(info)
        if shape is None:
            continue
        name = info.get("link_name") or f"{n1}-{n2}"
        ends = info.get("shape_ends") or (n1, n2)
        for e in ends:
            if e not in (n1, n2):
                raise InputError(f"link {name!r}: shape_ends names {e!r}, which is not an "
                                 f"end of {n1}-{n2}")
        egress = [Egress(n, i, n not in switches) for n, i in ((n1, i1), (n2, i2))
                  if n in ends]
        root_end = [Egress(n, i, False) for n, i in ((n1, i1), (n2, i2)) if n in switches]
        updown = root_end[:1] or [Egress(n1, i1, True)]
        grp = groups.get(name)
        if grp is None:
            groups[name] = NamedLink(name, shape, egress, updown)
        else:
            if grp.shape != shape:
                raise InputError(f"links named {name!r} have different shapes")
            grp.egress += egress
            grp.updown += updown
    return groups


def base_rtt_s(topo: Topo, src: str, dst: str, avoid: frozenset[str] = frozenset()
               ) -> float | None:
    """The configured round-trip delay between two nodes (pure): the configured one-way
    delays of every shaped egress on a shortest path (fewest links) there and back,
    without serialisation or queueing.  avoid: nodes the path must not cross (the other
    paths' switches, for a flow pinned to one path).  None when no path exists."""
    delay: dict[tuple[str, str], float] = {}
    for n1, n2, _i1, _i2, info in planned_links(topo):
        shape = shape_from_mininet_params(info)
        ends = info.get("shape_ends") or (n1, n2)
        for a, b in ((n1, n2), (n2, n1)):
            d = shape.delay_s if shape is not None and a in ends else 0.0
            delay[(a, b)] = max(delay.get((a, b), 0.0), d)
    adj: dict[str, list[str]] = {}
    for a, b in delay:
        adj.setdefault(a, []).append(b)
    prev: dict[str, str | None] = {src: None}
    frontier = [src]
    while frontier and dst not in prev:
        nxt = []
        for u in frontier:
            for v in sorted(adj.get(u, [])):
                if v not in prev and v not in avoid:
                    prev[v] = u
                    nxt.append(v)
        frontier = nxt
    if dst not in prev:
        return None
    total, v = 0.0, dst
    while (back := prev[v]) is not None:
        total += delay[(back, v)] + delay[(v, back)]
        v = back
    return total


def path_interfaces(planned: list[PlannedLink], hosts: set[str], path: str
                    ) -> list[PathInterface]:
    """Every interface on the links whose ``path`` option is path, hosts' first.

    hosts: the topology's host names.  `InputError` names the known paths when there is
    no such path."""
    out = []
    for n1, n2, i1, i2, info in planned:
        if info.get("path") != path:
            continue
        for n, i, params in ((n1, i1, info.get("params1")), (n2, i2, info.get("params2"))):
            addr = (params or {}).get("ip")
            out.append(PathInterface(n, i, addr.split("/")[0] if addr else None,
                                     n in hosts))
    if not out:
        known = sorted({str(p.info["path"]) for p in planned if p.info.get("path")})
        raise InputError(f"no path named {path!r}; this network has "
                         f"{', '.join(known) or 'no named paths'}")
    return sorted(out, key=lambda p: (not p.host_side, p.node, p.intf))


def interface_paths(planned: list[PlannedLink]) -> dict[str, str | None]:
    """Interface name -> the ``path`` option of its link (None: on no named path)."""
    paths: dict[str, str | None] = {}
    for _n1, _n2, i1, i2, info in planned:
        paths[i1] = paths[i2] = info.get("path")
    return paths


def namespace_interfaces(planned: list[PlannedLink], in_ns: set[str]
                         ) -> dict[str, list[str]]:
    """The interfaces the links make, by the node whose namespace holds them ("" for the
    root namespace: switch ports), in the topology's order.  in_ns: the nodes that have
    a namespace of their own (Mininet's hosts)."""
    out: dict[str, list[str]] = {}
    for n1, n2, i1, i2, _info in planned:
        for node, intf in ((n1, i1), (n2, i2)):
            out.setdefault(node if node in in_ns else "", []).append(intf)
    return out


def veth_peers(planned: list[PlannedLink], in_ns: set[str]
               ) -> tuple[dict[str, str], dict[str, bool]]:
    """({interface: the other end of its veth}, {interface: whether it is in a node's own
    namespace}) for every link end; in_ns as for `namespace_interfaces`."""
    peer: dict[str, str] = {}
    where: dict[str, bool] = {}
    for n1, n2, i1, i2, _info in planned:
        peer[i1], peer[i2] = i2, i1
        where[i1], where[i2] = n1 in in_ns, n2 in in_ns
    return peer, where


def describe(links: dict[str, NamedLink]) -> dict[str, dict[str, object]]:
    """The shaped links in base units, for ``metadata.json``."""
    return {name: {"shape": asdict(link.shape), "up": link.up,
                   "egress": [asdict(e) for e in link.egress]}
            for name, link in links.items()}
