"""Pure path logic: equal-cost next hops, path counts, decision ports, routing errors."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controllers.paths import RoutingError, compute_routes
from testbed.core.errors import InputError
from topologies.fattree import LinkInfo, fattree_layout


def pod_of(layout, host: str) -> int:
    return layout.switch(next(h.switch for h in layout.hosts if h.name == host)).pod


@pytest.mark.parametrize("k", [4, 6, 8])
def test_equal_cost_path_counts(k: int) -> None:
    layout = fattree_layout(k)
    routes = compute_routes(layout)
    half = k // 2
    hosts = [h.name for h in layout.hosts]
    edge = {h.name: h.switch for h in layout.hosts}
    # every pair when small, a spread sample when large (each pair costs a path walk)
    pairs = [(a, b) for a in hosts for b in hosts if a != b]
    if k > 4:
        pairs = pairs[:: max(1, len(pairs) // 400)]
    for a, b in pairs:
        paths = routes.paths(a, b)
        if edge[a] == edge[b]:
            want, length = 1, 1
        elif pod_of(layout, a) == pod_of(layout, b):
            want, length = half, 3
        else:
            want, length = half * half, 5
        assert len(paths) == want, (a, b)
        assert len(set(paths)) == want
        assert all(len(p) == length for p in paths)
        for p in paths:  # up-down: levels rise then fall, never revisit a switch
            levels = [layout.switch(s).level for s in p]
            top = levels.index(max(levels))
            assert levels[: top + 1] == sorted(levels[: top + 1])
            assert levels[top:] == sorted(levels[top:], reverse=True)
            assert len(set(p)) == len(p)


def test_k4_pair_counts_exactly() -> None:
    routes = compute_routes(fattree_layout(4))
    assert len(routes.paths("S0", "S15")) == 4
    assert len(routes.paths("S0", "S2")) == 2
    assert routes.paths("S0", "S1") == [("E0",)]
    assert sorted(routes.paths("S0", "S4")) == [
        ("E0", "A0", "C0", "A2", "E2"), ("E0", "A0", "C1", "A2", "E2"),
        ("E0", "A1", "C2", "A3", "E2"), ("E0", "A1", "C3", "A3", "E2")]


def test_next_hops_are_up_when_choosing_and_unique_down() -> None:
    layout = fattree_layout(4)
    routes = compute_routes(layout)
    assert routes.hops["E0"]["S0"] == (1,) and routes.hops["E0"]["S1"] == (2,)
    assert routes.hops["E0"]["S2"] == (3, 4) and routes.hops["E0"]["S15"] == (3, 4)
    assert routes.hops["A0"]["S2"] == (2,) and routes.hops["A0"]["S15"] == (3, 4)
    assert routes.hops["C0"]["S15"] == (4,) and routes.hops["C0"]["S0"] == (1,)
    for sw in layout.switches:
        for host, ports in routes.hops[sw.name].items():
            if len(ports) > 1:
                assert set(ports) == set(layout.up_ports(sw.name)), (sw.name, host)


def test_choice_ports_are_the_downlinks_of_edge_and_aggregation() -> None:
    layout = fattree_layout(4)
    routes = compute_routes(layout)
    for sw in layout.switches:
        want = [] if sw.level == 3 else layout.down_ports(sw.name)
        assert routes.choice_ports(sw.name) == want, sw.name
        assert routes.choice_width(sw.name) == (1 if sw.level == 3 else 2)
    assert compute_routes(fattree_layout(6)).choice_width("E0") == 3


def test_unroutable_layouts_are_rejected() -> None:
    layout = fattree_layout(4)
    cut = replace(layout, links=tuple(ln for ln in layout.links
                                      if not (ln.lower.startswith("A") and ln.lower in
                                              ("A2", "A3"))))
    with pytest.raises(RoutingError, match="no path") as err:
        compute_routes(cut)
    assert isinstance(err.value, InputError)
    dup = replace(layout, links=(*layout.links, LinkInfo("S0", 0, "E1", 9, "host_edge")))
    with pytest.raises(RoutingError, match="port 0 of S0 twice"):
        compute_routes(dup)
    ghost = replace(layout, links=(*layout.links, LinkInfo("S99", 0, "E1", 9, "host_edge")))
    with pytest.raises(RoutingError, match="unknown node"):
        compute_routes(ghost)


def test_k2_is_a_single_pod_pair() -> None:
    routes = compute_routes(fattree_layout(2))
    assert routes.paths("S0", "S1") == [("E0", "A0", "C0", "A1", "E1")]
