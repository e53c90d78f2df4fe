"""testbed.plan.links: a topology's named links and paths, derived without a network."""

from __future__ import annotations

import pytest
from mininet.topo import Topo

from testbed.core.errors import InputError
from testbed.plan import links as ln
from testbed.spec.linkshape import LinkShape
from testbed.spec.model import PathSpec
from topologies.multipath import MultiHomedTopo
from topologies.pair import PairTopo

SHAPE = LinkShape(bw_bps=10_000_000, delay_s=0.01)


def _multipath() -> MultiHomedTopo:
    return MultiHomedTopo(paths=[PathSpec(name=n, bw=10_000_000, delay=0.01)
                                 for n in ("wifi", "cell")])


def test_planned_links_follow_mininet_naming() -> None:
    ends = {(i1, i2) for _n1, _n2, i1, i2, _ in ln.planned_links(_multipath())}
    assert ("client-eth1", "s2-eth1") in ends
    assert ("router-eth2", "server-eth0") in ends


def test_multipath_groups_shape_switch_ports_only() -> None:
    groups = ln.link_groups(_multipath())
    assert sorted(groups) == ["cell", "wifi"]
    wifi = groups["wifi"]
    assert sorted(e.intf for e in wifi.egress) == ["s1-eth1", "s1-eth2"]
    assert all(not e.in_namespace and e.namespace == "" for e in wifi.egress)
    assert sorted(e.intf for e in wifi.updown) == ["s1-eth1", "s1-eth2"]


def test_pair_topology_shapes_both_host_ends() -> None:
    groups = ln.link_groups(PairTopo(shape=SHAPE))
    link = groups["link"]
    assert [(e.node, e.intf, e.in_namespace) for e in link.egress] == [
        ("h1", "h1-eth0", True), ("h2", "h2-eth0", True)]
    assert [e.namespace for e in link.egress] == ["h1", "h2"]
    assert [e.intf for e in link.updown] == ["h1-eth0"]  # no root-namespace end


class TCStyle(Topo):
    def build(self, **_opts) -> None:
        self.addHost("a")
        self.addSwitch("s9")
        self.addHost("b")
        self.addLink("a", "s9", bw=5, delay="20ms", loss=1, max_queue_size=50)
        self.addLink("s9", "b")


def test_tclink_style_options_are_shaped_and_named_by_nodes() -> None:
    groups = ln.link_groups(TCStyle())
    assert list(groups) == ["a-s9"]
    g = groups["a-s9"]
    assert g.shape == LinkShape(bw_bps=5_000_000, delay_s=0.02, loss_pct=1.0, queue_pkts=50)
    assert {e.intf for e in g.egress} == {"a-eth0", "s9-eth1"}
    assert [e.intf for e in g.updown] == ["s9-eth1"]


class BadEnds(Topo):
    def build(self, **_opts) -> None:
        self.addHost("a")
        self.addHost("b")
        self.addLink("a", "b", shape=SHAPE, shape_ends=("c",))


def test_shape_ends_must_be_link_ends() -> None:
    with pytest.raises(InputError, match="shape_ends"):
        ln.link_groups(BadEnds())


def test_namespaces_and_peers_of_the_link_ends() -> None:
    planned = ln.planned_links(TCStyle())
    assert ln.namespace_interfaces(planned, {"a", "b"}) == {
        "a": ["a-eth0"], "": ["s9-eth1", "s9-eth2"], "b": ["b-eth0"]}
    peer, where = ln.veth_peers(planned, {"a", "b"})
    assert peer == {"a-eth0": "s9-eth1", "s9-eth1": "a-eth0",
                    "s9-eth2": "b-eth0", "b-eth0": "s9-eth2"}
    assert where == {"a-eth0": True, "s9-eth1": False, "s9-eth2": False, "b-eth0": True}
    assert ln.interface_paths(planned) == dict.fromkeys(peer)


def test_path_interfaces_put_hosts_first_and_name_known_paths() -> None:
    topo = _multipath()
    planned = ln.planned_links(topo)
    wifi = ln.path_interfaces(planned, set(topo.hosts()), "wifi")
    assert [p.host_side for p in wifi] == sorted((p.host_side for p in wifi), reverse=True)
    assert wifi[0].node == "client" and wifi[0].addr is not None
    with pytest.raises(InputError, match="no path named 'x'; this network has cell, wifi"):
        ln.path_interfaces(planned, set(topo.hosts()), "x")


def test_describe_is_base_units() -> None:
    out = ln.describe(ln.link_groups(PairTopo(shape=SHAPE)))
    assert out["link"]["shape"]["bw_bps"] == 10_000_000 and out["link"]["up"] is True
    assert out["link"]["egress"][0] == {"node": "h1", "intf": "h1-eth0", "in_namespace": True}
