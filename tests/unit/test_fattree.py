"""FatTreeTopo and fattree_layout: sizes, names, DPIDs, ports, addresses, errors."""

from __future__ import annotations

from collections import deque
from pathlib import Path

import pytest

from testbed.core.errors import InputError
from testbed.spec.linkshape import LinkShape
from topologies.fattree import (
    AGGREGATION,
    CORE,
    EDGE,
    FabricLayout,
    FatTreeTopo,
    TopologyError,
    fattree_layout,
    host_mac,
)

FATTREE_PY = Path(__file__).resolve().parents[2] / "topologies" / "fattree.py"


def shortest_path_count(topo: FatTreeTopo, src: str, dst: str) -> int:
    """Number of shortest paths src -> dst in the Mininet graph (hosts are not transit)."""
    hosts = set(topo.hosts())
    adj: dict[str, list[str]] = {}
    for a, b in topo.links():
        adj.setdefault(a, []).append(b)
        adj.setdefault(b, []).append(a)
    dist, count = {src: 0}, {src: 1}
    queue = deque([src])
    while queue:
        node = queue.popleft()
        if node in hosts and node != src:
            continue
        for nbr in adj[node]:
            if nbr not in dist:
                dist[nbr] = dist[node] + 1
                count[nbr] = count[node]
                queue.append(nbr)
            elif dist[nbr] == dist[node] + 1:
                count[nbr] += count[node]
    return count[dst]


def test_k4_sizes_and_names() -> None:
    topo = FatTreeTopo(4)
    assert len(topo.switches()) == 20
    assert len(topo.hosts()) == 16
    assert len(topo.links()) == 48
    assert sorted(topo.switches()) == sorted(
        [f"C{i}" for i in range(4)] + [f"A{i}" for i in range(8)] + [f"E{i}" for i in range(8)])
    assert sorted(topo.hosts(), key=lambda n: int(n[1:])) == [f"S{i}" for i in range(16)]


@pytest.mark.parametrize(("k", "switches", "hosts", "links"),
                         [(2, 5, 2, 6), (4, 20, 16, 48), (6, 45, 54, 162), (8, 80, 128, 384)])
def test_sizes_for_k(k: int, switches: int, hosts: int, links: int) -> None:
    layout = fattree_layout(k)
    assert (len(layout.switches), len(layout.hosts), len(layout.links)) == (switches, hosts, links)
    levels = [s.level for s in layout.switches]
    assert levels.count(CORE) == (k // 2) ** 2
    assert levels.count(AGGREGATION) == levels.count(EDGE) == k * k // 2


def test_inter_pod_hosts_have_four_shortest_paths() -> None:
    topo = FatTreeTopo(4)
    assert shortest_path_count(topo, "S0", "S15") == 4   # different pods
    assert shortest_path_count(topo, "S0", "S4") == 4
    assert shortest_path_count(topo, "S0", "S2") == 2    # same pod, other edge
    assert shortest_path_count(topo, "S0", "S1") == 1    # same edge


def test_dpids_are_deterministic_and_unique() -> None:
    layout = fattree_layout(4)
    dpids = {s.name: s.dpid_str for s in layout.switches}
    assert dpids["E0"] == "0000000000010000"
    assert dpids["E7"] == "0000000000010007"
    assert dpids["A3"] == "0000000000020003"
    assert dpids["C2"] == "0000000000030002"
    assert len(set(dpids.values())) == 20
    topo = FatTreeTopo(4)
    assert topo.nodeInfo("A3")["dpid"] == "0000000000020003"


def test_ports_up_and_down() -> None:
    layout = fattree_layout(4)
    assert layout.down_ports("E0") == [1, 2] and layout.up_ports("E0") == [3, 4]
    assert layout.down_ports("A1") == [1, 2] and layout.up_ports("A1") == [3, 4]
    assert layout.down_ports("C3") == [1, 2, 3, 4] and layout.up_ports("C3") == []
    wiring = {(ln.lower, ln.upper): (ln.lower_port, ln.upper_port) for ln in layout.links}
    assert wiring[("S0", "E0")] == (0, 1)
    assert wiring[("S3", "E1")] == (0, 2)
    assert wiring[("E1", "A0")] == (3, 2)     # E(p=0,e=1) port k/2+1+j, A(0,0) port e+1
    assert wiring[("E2", "A3")] == (4, 1)     # pod 1: E2 = E(1,0), A3 = A(1,1)
    assert wiring[("A1", "C2")] == (3, 1)     # A(0,1) -> C(1*2+0), core port p+1
    assert wiring[("A7", "C3")] == (4, 4)     # A(3,1) -> C(1*2+1), core port 4
    topo = FatTreeTopo(4)
    info = topo.linkInfo("E1", "A0")
    assert (info["node1"], info["port1"], info["node2"], info["port2"]) == ("E1", 3, "A0", 2)


def test_addresses() -> None:
    layout = fattree_layout(4)
    hosts = {h.name: h for h in layout.hosts}
    assert (hosts["S0"].ip, hosts["S0"].mac, hosts["S0"].switch) == ("10.0.0.2", host_mac(0), "E0")
    assert (hosts["S5"].ip, hosts["S5"].switch, hosts["S5"].port) == ("10.1.0.3", "E2", 2)
    assert hosts["S15"].ip == "10.3.1.3"
    assert host_mac(0) == "00:00:00:00:00:01" and host_mac(255) == "00:00:00:00:01:00"
    topo = FatTreeTopo(4)
    assert topo.nodeInfo("S5") == {"ip": "10.1.0.3/8", "mac": "00:00:00:00:00:06"}


@pytest.mark.parametrize("k", [3, 5, 0, -2, 1, "x", 2.5, None, True])
def test_bad_arity_is_rejected(k: object) -> None:
    with pytest.raises(TopologyError) as err:
        fattree_layout(k)  # type: ignore[arg-type]
    assert isinstance(err.value, InputError)
    assert "even" in str(err.value) and "k" in str(err.value)
    with pytest.raises(InputError):
        FatTreeTopo(k)


def test_link_options_per_layer() -> None:
    topo = FatTreeTopo(4, bw=10, delay="25us", max_queue_size=1000,
                       layers={"agg_core": {"bw": 5}})
    assert topo.linkInfo("S0", "E0")["bw"] == 10
    assert topo.linkInfo("E0", "A0")["delay"] == "25us"
    assert topo.linkInfo("A0", "C0")["bw"] == 5
    assert topo.linkInfo("A0", "C0")["max_queue_size"] == 1000
    plain = FatTreeTopo(4)
    assert "bw" not in plain.linkInfo("S0", "E0")
    with pytest.raises(TopologyError, match="layer"):
        FatTreeTopo(4, layers={"spine": {"bw": 1}})
    with pytest.raises(TopologyError, match="option"):
        FatTreeTopo(4, layers={"agg_core": {"speed": 1}})


def test_one_shape_for_every_link() -> None:
    shape = LinkShape(bw_bps=10_000_000, delay_s=25e-6, queue_pkts=100)
    topo = FatTreeTopo(4, shape=shape)
    assert {topo.linkInfo(a, b)["shape"] for a, b in (("S0", "E0"), ("E0", "A0"),
                                                     ("A0", "C0"))} == {shape}
    assert topo.linkInfo("S0", "E0")["bw"] == 10  # and TCLink-style keys for `mn`
    with pytest.raises(TopologyError, match="not both"):
        FatTreeTopo(4, shape=shape, bw=10)


def test_layout_round_trips_through_dict() -> None:
    layout = fattree_layout(4)
    assert FabricLayout.from_dict(layout.to_dict()) == layout
    with pytest.raises(TopologyError, match="malformed"):
        FabricLayout.from_dict({"kind": "fattree", "k": 4, "switches": [{"name": "x"}]})


def test_loads_like_mn_custom() -> None:
    """`mn --custom topologies/fattree.py --topo fattree,4` execs the file in a fresh dict."""
    customs: dict = {}
    exec(compile(FATTREE_PY.read_text(), str(FATTREE_PY), "exec"), customs, customs)
    from mininet.util import buildTopo

    topo = buildTopo(customs["topos"], "fattree,4")
    assert len(topo.switches()) == 20 and len(topo.links()) == 48
    topo = buildTopo(customs["topos"], "fattree,2,bw=10")
    assert topo.linkInfo("S0", "E0")["bw"] == 10
