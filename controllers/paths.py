"""Pure path logic over a `FabricLayout`: equal-cost next hops, path counts, decision ports.

Every switch forwards a packet for host ``h`` to a neighbour one hop closer to ``h``
(shortest-path distance computed by breadth-first search from ``h``).  In a fat-tree the
shortest paths are exactly the up-down paths, and since each hop strictly decreases the
distance, forwarding can never loop.  Where a switch has several such neighbours (edge and
aggregation uplinks towards another edge or pod) the apps choose among them; downward
paths are unique.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from testbed.core.errors import InputError
from topologies.fattree import FabricLayout


class RoutingError(InputError):
    """The layout is inconsistent or some host cannot be reached from some switch."""


@dataclass(frozen=True)
class Adjacency:
    """Port-level adjacency: ``ports[node][port] = neighbour`` (hosts use port 0)."""

    ports: dict[str, dict[int, str]]


def adjacency(layout: FabricLayout) -> Adjacency:
    """Build the port map of layout, checking that names and ports are consistent.

    layout: the fabric; raises `RoutingError` for unknown nodes or a port used twice.
    """
    names = [s.name for s in layout.switches] + [h.name for h in layout.hosts]
    if len(set(names)) != len(names):
        raise RoutingError(f"{layout.kind} layout has duplicate node names; names must be unique")
    dpids = [s.dpid for s in layout.switches]
    if len(set(dpids)) != len(dpids):
        raise RoutingError(f"{layout.kind} layout has duplicate DPIDs; DPIDs must be unique")
    ports: dict[str, dict[int, str]] = {n: {} for n in names}
    for ln in layout.links:
        for node, port, other in ((ln.lower, ln.lower_port, ln.upper),
                                  (ln.upper, ln.upper_port, ln.lower)):
            if node not in ports:
                raise RoutingError(f"{layout.kind} layout link {ln} names unknown node {node!r}")
            if port in ports[node]:
                raise RoutingError(f"{layout.kind} layout uses port {port} of {node} twice")
            ports[node][port] = other
    return Adjacency(ports)


def distances_to(adj: Adjacency, host: str, hosts: frozenset[str]) -> dict[str, int]:
    """Hop distance from every node to host, never passing through another host.

    adj: the port map; host: the destination; hosts: names of all hosts.
    """
    dist = {host: 0}
    queue = deque([host])
    while queue:
        node = queue.popleft()
        if node != host and node in hosts:
            continue
        for nbr in adj.ports[node].values():
            if nbr not in dist:
                dist[nbr] = dist[node] + 1
                queue.append(nbr)
    return dist


@dataclass(frozen=True)
class Routes:
    """Equal-cost next hops: ``hops[switch][host]`` is the sorted tuple of output ports.

    layout: the fabric; adj: its port map; dist: ``dist[host][node]`` hop distances.
    """

    layout: FabricLayout
    adj: Adjacency
    hops: dict[str, dict[str, tuple[int, ...]]]
    dist: dict[str, dict[str, int]]

    def choice_ports(self, switch: str) -> list[int]:
        """Ingress ports of switch where packets arrive that have a choice of next hop.

        A packet for host h arrives on port p only if the neighbour there is one hop farther
        from h (the packet is on a shortest path); the port is a decision port if some such
        h has more than one next hop.  For a fat-tree: the DOWN ports of edge and aggregation
        switches; none at the core.
        """
        out = set()
        for host, ports in self.hops[switch].items():
            if len(ports) < 2:
                continue
            here = self.dist[host][switch]
            for port, nbr in self.adj.ports[switch].items():
                if self.dist[host].get(nbr) == here + 1:
                    out.add(port)
        return sorted(out)

    def choice_width(self, switch: str) -> int:
        """The modulus for random marks at switch: lcm of its next-hop set sizes (1 = none)."""
        sizes = {len(p) for p in self.hops[switch].values()}
        return math.lcm(*sizes) if sizes else 1

    def paths(self, src: str, dst: str) -> list[tuple[str, ...]]:
        """Every equal-cost path from host src to host dst, as tuples of switch names."""
        first = self.adj.ports[src][0]
        return [(first, *rest) for rest in self._walk(first, dst)]

    def _walk(self, node: str, dst: str) -> Iterator[tuple[str, ...]]:
        for port in self.hops[node][dst]:
            nxt = self.adj.ports[node][port]
            if nxt == dst:
                yield ()
            else:
                for rest in self._walk(nxt, dst):
                    yield (nxt, *rest)


def compute_routes(layout: FabricLayout) -> Routes:
    """Equal-cost next hops from every switch to every host.

    layout: the fabric; raises `RoutingError` when a host is not attached by port 0 or
    some switch cannot reach some host.
    """
    adj = adjacency(layout)
    hosts = frozenset(h.name for h in layout.hosts)
    for h in layout.hosts:
        if list(adj.ports[h.name]) != [0]:
            raise RoutingError(f"{layout.kind} layout: host {h.name} must have exactly one link, "
                               "on port 0")
    hops: dict[str, dict[str, tuple[int, ...]]] = {s.name: {} for s in layout.switches}
    dist: dict[str, dict[str, int]] = {}
    for h in layout.hosts:
        d = distances_to(adj, h.name, hosts)
        dist[h.name] = d
        for sw in layout.switches:
            if sw.name not in d:
                raise RoutingError(f"{layout.kind} layout cannot be routed: switch {sw.name} "
                                   f"has no path to host {h.name}; check its links")
            here = d[sw.name]
            hops[sw.name][h.name] = tuple(sorted(
                port for port, nbr in adj.ports[sw.name].items() if d.get(nbr) == here - 1
                and (nbr not in hosts or nbr == h.name)))
    return Routes(layout, adj, hops, dist)
