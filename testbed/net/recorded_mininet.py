"""Mininet's network object for a dry run: nodes, interfaces and links as plain values.

A `testbed.core.recording.RecordingRunner` executes nothing, so no node, veth or bridge
may be made; `testbed.net.mininet_net.make_mininet` returns a `RecordedMininet` instead
of Mininet's `Mininet` then.  ``build()`` lays out the topology's hosts, switches and
links with the names, addresses and DPIDs Mininet would give them, ``start()`` and
``stop()`` do nothing.  What Mininet itself runs (node shells, ``ip link add``, the
bridges' ``ovs-vsctl`` transaction) is not a command of the run's runner and is not
listed by a real run either.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from testbed.plan.links import planned_links

if TYPE_CHECKING:
    from mininet.topo import Topo

RECORDED_NODE_PID = 0  # shown as ``mnexec -a 0``; no process is ever signalled by it


def _address(ip: str | None) -> tuple[str | None, int | None]:
    """``10.0.0.2/24`` -> (``10.0.0.2``, 24); no address -> (None, None)."""
    if not ip:
        return None, None
    addr, _sep, plen = ip.partition("/")
    return addr, int(plen) if plen else None


def _default_intf(node: RecordedNode) -> RecordedIntf | None:
    """The interface Mininet's ``defaultIntf`` names: the lowest port (``-ethN``)."""
    def port(intf: RecordedIntf) -> int:
        m = re.search(r"eth(\d+)$", intf.name)
        return int(m.group(1)) if m else len(node.intfs)
    return min(node.intfs, key=port, default=None)


class RecordedIntf:
    """An interface: its name, its node, its IPv4 address (Mininet's ``IP()``) and
    prefix length (``prefixLen``)."""

    def __init__(self, name: str, node: RecordedNode, ip: str | None):
        self.name = name
        self.node = node
        self._ip, self.prefixLen = _address(ip)

    def IP(self) -> str | None:  # Mininet's spelling
        return self._ip


class RecordedNode:
    """A host or switch that exists only on paper."""

    def __init__(self, name: str, in_namespace: bool, dpid: str | None = None):
        self.name = name
        self.inNamespace = in_namespace
        self.pid = RECORDED_NODE_PID
        self.shell = None
        self.intfs: list[RecordedIntf] = []
        if dpid is not None:
            self.dpid = dpid

    def intfList(self) -> list[RecordedIntf]:
        return list(self.intfs)


class RecordedLink:
    """A link between two interfaces."""

    def __init__(self, intf1: RecordedIntf, intf2: RecordedIntf):
        self.intf1 = intf1
        self.intf2 = intf2


class RecordedMininet:
    """What `testbed.net.network.Network` needs of Mininet's network (`MnNet`), built
    from the topology alone."""

    def __init__(self, topo: Topo):
        self.topo = topo
        self.hosts: list[RecordedNode] = []
        self.switches: list[RecordedNode] = []
        self.links: list[RecordedLink] = []
        self.nameToNode: dict[str, RecordedNode] = {}

    def build(self) -> None:
        topo = self.topo
        self.hosts = [RecordedNode(h, True) for h in topo.hosts()]
        self.switches = []
        for i, s in enumerate(topo.switches()):
            digits = re.findall(r"\d+", s)  # Mininet's default DPID: the name's number
            dpid = topo.nodeInfo(s).get("dpid") or f"{int(digits[0]) if digits else i + 1:x}"
            self.switches.append(RecordedNode(s, False, str(dpid).zfill(16)))
        self.nameToNode = {n.name: n for n in self.hosts + self.switches}
        for n1, n2, i1, i2, info in planned_links(topo):
            ends = []
            for node, intf, params in ((n1, i1, info.get("params1")),
                                       (n2, i2, info.get("params2"))):
                end = RecordedIntf(intf, self.nameToNode[node], (params or {}).get("ip"))
                self.nameToNode[node].intfs.append(end)
                ends.append(end)
            self.links.append(RecordedLink(ends[0], ends[1]))
        for host in self.hosts:  # a host's own address goes on its default interface
            default = _default_intf(host)
            ip = topo.nodeInfo(host.name).get("ip")
            if default is not None and ip and default.IP() is None:
                default._ip, default.prefixLen = _address(ip)

    def start(self) -> None:
        """Nothing to start."""

    def stop(self) -> None:
        """Nothing to stop."""
