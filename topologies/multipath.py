"""`MultiHomedTopo`: a client with one interface per path, each path its own chain.

Pure Mininet `Topo` (no root needed to build or inspect it).  Usable from Mininet
directly::

    mn --custom topologies/multipath.py --topo multipath,2

Layout for paths p0..pN-1 (p_i named e.g. "wifi", "lte")::

    client-eth<i> -- s<i+1> -- router-eth<i>        (single-homed server, default)
                                router-eth<N> -- server-eth0
    client-eth<i> -- s<i+1> -- server-eth<i>        (server_multihomed=True)

Each path has its own OVS switch ``s<i+1>`` (standalone, DPID i+1).  The path's shape is
applied on that switch's two ports: the egress of ``s<i+1>-eth1`` (towards the client:
downlink) and of ``s<i+1>-eth2`` (towards the server: uplink), so one-way delay is
``delay`` each way and RTT = 2 x delay.  The hosts' own interfaces stay unshaped.

Addressing plan (path index i, 0-based; at most 99 paths):

=====================  ==========================  ============================
what                   single-homed server         multi-homed server
=====================  ==========================  ============================
path i subnet          10.0.(i+1).0/24             10.0.(i+1).0/24
client-eth<i>          10.0.(i+1).1                10.0.(i+1).1
far end of path i      router-eth<i> 10.0.(i+1).254  server-eth<i> 10.0.(i+1).2
server LAN             10.0.100.0/24               --
server-eth0            10.0.100.1 (gw .254)        10.0.1.2
router-eth<N>          10.0.100.254                --
client policy table    100+i+1 (101, 102, ...)     100+i+1
=====================  ==========================  ============================

The client's main table sends to the server through path 0; `setup_commands` adds one
policy-routing table per path (``ip rule add from 10.0.(i+1).1 table 10(i+1)``) so that
a socket bound to a path's address leaves through that path (what MPTCP subflows and
``iperf3 -B`` need) and sets ``rp_filter=2`` on the client; the router forwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mininet.node import Node
from mininet.topo import Topo

from testbed.core.errors import InputError
from testbed.spec.linkshape import mininet_params
from testbed.spec.model import PathSpec

MAX_PATHS = 99
SERVER_LAN = 100
TABLE_BASE = 100


@dataclass(frozen=True)
class PathAddress:
    """Where path i lives in the addressing plan."""

    index: int
    name: str
    subnet: str
    client_intf: str
    client_addr: str
    far_node: str
    far_intf: str
    far_addr: str
    switch: str
    table: int


def forwarding_sysctls() -> list[list[str]]:
    """The commands that make a node forward IPv4."""
    return [["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]]


class LinuxRouter(Node):
    """A Mininet node that forwards IPv4 (enables it itself, so plain `mn` works too)."""

    def config(self, **params):  # Mininet's signature
        result = super().config(**params)
        for argv in forwarding_sysctls():
            self.cmd(*argv)
        return result


def _check_paths(paths: Sequence[PathSpec]) -> None:
    if not paths:
        raise InputError("topology.paths: give at least one path")
    if len(paths) > MAX_PATHS:
        raise InputError(f"topology.paths: at most {MAX_PATHS} paths, got {len(paths)}")
    seen: set[str] = set()
    for i, p in enumerate(paths):  # each name is checked by PathSpec itself
        if p.name in seen:
            raise InputError(f"topology.paths[{i}].name: {p.name!r} is used twice")
        seen.add(p.name)


def address_plan(paths: Sequence[PathSpec], server_multihomed: bool = False
                 ) -> list[PathAddress]:
    """The addressing plan (see the module docstring), one entry per path."""
    _check_paths(paths)
    plan = []
    for i, p in enumerate(paths):
        net = f"10.0.{i + 1}"
        far = "server" if server_multihomed else "router"
        plan.append(PathAddress(
            index=i, name=p.name, subnet=f"{net}.0/24", client_intf=f"client-eth{i}",
            client_addr=f"{net}.1", far_node=far, far_intf=f"{far}-eth{i}",
            far_addr=f"{net}.2" if server_multihomed else f"{net}.254",
            switch=f"s{i + 1}", table=TABLE_BASE + i + 1))
    return plan


class MultiHomedTopo(Topo):
    """A client with N paths (each its own switch) to a single- or multi-homed server.

    paths: the spec's `testbed.spec.model.PathSpec` list (name and shape of each path);
    server_multihomed: give the server one interface per path (each path then ends at
    the server directly, no router).
    """

    def build(self, paths: Sequence[PathSpec] = (), server_multihomed: bool = False,
              **_opts) -> None:
        plan = address_plan(paths, server_multihomed)
        self.paths = list(paths)
        self.plan = plan
        self.server_multihomed = server_multihomed
        first = plan[0]
        self.addHost("client", ip=f"{first.client_addr}/24",
                     defaultRoute=None if server_multihomed else f"via {first.far_addr}")
        if server_multihomed:
            self.addHost("server", ip=f"{first.far_addr}/24")
        else:
            self.addHost("router", cls=LinuxRouter, ip=f"{first.far_addr}/24")
            self.addHost("server", ip=f"10.0.{SERVER_LAN}.1/24",
                         defaultRoute=f"via 10.0.{SERVER_LAN}.254")
        for spec, pa in zip(paths, plan, strict=True):
            shape = spec.shape
            self.addSwitch(pa.switch, dpid=f"{pa.index + 1:016x}", failMode="standalone")
            # access link: TCLink-style keys too, so `mn --link tc` shapes it similarly
            self.addLink("client", pa.switch, port1=pa.index, port2=1,
                         params1={"ip": f"{pa.client_addr}/24"},
                         path=spec.name, link_name=spec.name, shape=shape,
                         shape_ends=(pa.switch,), **mininet_params(shape))
            self.addLink(pa.switch, pa.far_node, port1=2, port2=pa.index,
                         params2={"ip": f"{pa.far_addr}/24"},
                         path=spec.name, link_name=spec.name, shape=shape,
                         shape_ends=(pa.switch,))
        if not server_multihomed:
            self.addLink("router", "server", port1=len(plan), port2=0,
                         params1={"ip": f"10.0.{SERVER_LAN}.254/24"},
                         params2={"ip": f"10.0.{SERVER_LAN}.1/24"})

    def server_addr(self, path: str | None = None) -> str:
        """The server's address (for a multi-homed server: on the named path)."""
        if not self.server_multihomed:
            return f"10.0.{SERVER_LAN}.1"
        return self.path(path or self.plan[0].name).far_addr

    def path(self, name: str) -> PathAddress:
        """The addressing-plan entry of the named path."""
        for pa in self.plan:
            if pa.name == name:
                return pa
        known = ", ".join(pa.name for pa in self.plan)
        raise InputError(f"no path named {name!r}; the topology has {known}")

    def setup_commands(self) -> list[tuple[str, list[str]]]:
        """(host, argv) commands the network runs after start: forwarding and routing."""
        cmds: list[tuple[str, list[str]]] = []
        if not self.server_multihomed:
            cmds += [("router", argv) for argv in forwarding_sysctls()]
        cmds += [("client", ["sysctl", "-q", "-w", "net.ipv4.conf.all.rp_filter=2"])]
        for pa in self.plan:
            if self.server_multihomed:
                route = ["ip", "route", "replace", pa.subnet, "dev", pa.client_intf,
                         "scope", "link", "table", str(pa.table)]
            else:
                route = ["ip", "route", "replace", "default", "via", pa.far_addr, "dev",
                         pa.client_intf, "table", str(pa.table)]
            cmds.append(("client", route))
            cmds.append(("client", ["ip", "rule", "add", "from", pa.client_addr, "table",
                                    str(pa.table), "priority", str(pa.table)]))
        return cmds


def default_paths(n: int = 2) -> list[PathSpec]:
    """n paths named p0.. at 10 Mbit/s, 10 ms one-way, 100-packet queues."""
    return [PathSpec(name=f"p{i}", bw=10_000_000, delay=0.010, queue=100) for i in range(n)]


def _mn_multipath(n: int = 2, multihomed: int = 0) -> MultiHomedTopo:
    return MultiHomedTopo(paths=default_paths(int(n)), server_multihomed=bool(int(multihomed)))


topos = {"multipath": _mn_multipath}
