"""`PairTopo`: two hosts joined by one shaped link (no switch, so no OVS needed).

``h1`` (10.0.0.1/24) -- ``h2`` (10.0.0.2/24); the link is named ``link`` and carries
the same `LinkShape` in each direction (on the egress of ``h1-eth0`` and ``h2-eth0``),
so RTT = 2 x delay.  The link-fidelity test and ``benchmarks/fidelity.py`` use it.
"""

from __future__ import annotations

from mininet.topo import Topo

from testbed.spec.linkshape import LinkShape, mininet_params


class PairTopo(Topo):
    """Two hosts over one shaped link.

    shape: the link's `LinkShape` (each direction).
    """

    def build(self, shape: LinkShape = LinkShape(), **_opts) -> None:
        self.addHost("h1", ip="10.0.0.1/24")
        self.addHost("h2", ip="10.0.0.2/24")
        self.addLink("h1", "h2", port1=0, port2=0, link_name="link", path="link", shape=shape,
                     params1={"ip": "10.0.0.1/24"}, params2={"ip": "10.0.0.2/24"},
                     **mininet_params(shape))


topos = {"pair": lambda: PairTopo()}
