"""MultiHomedTopo is pure data: build and inspect it without root."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from testbed.core.errors import InputError
from testbed.spec.model import PathSpec
from topologies.multipath import (
    MultiHomedTopo,
    address_plan,
    default_paths,
    topos,
)

WIFI = PathSpec(name="wifi", bw=10_000_000, delay=0.01, queue=100)
G3 = PathSpec(name="g3", bw=5_000_000, delay=0.04, jitter=0.005)


def _links(topo: MultiHomedTopo) -> list[tuple[str, str, dict]]:
    return list(topo.links(sort=True, withInfo=True))


def test_single_homed_layout_and_addresses() -> None:
    topo = MultiHomedTopo(paths=[WIFI, G3])
    assert sorted(topo.hosts()) == ["client", "router", "server"]
    assert sorted(topo.switches()) == ["s1", "s2"]
    assert len(topo.links()) == 5  # 2 per path + router-server
    info = {(a, b): i for a, b, i in _links(topo)}
    acc = info[("client", "s1")]
    assert acc["params1"] == {"ip": "10.0.1.1/24"}
    assert (acc["port1"], acc["port2"]) == (0, 1)
    assert acc["shape"] == WIFI.shape and acc["shape_ends"] == ("s1",)
    far = info[("s2", "router")] if ("s2", "router") in info else info[("router", "s2")]
    assert far["params2"] == {"ip": "10.0.2.254/24"} and far["path"] == "g3"
    lan = info[("router", "server")]
    assert lan["params2"] == {"ip": "10.0.100.1/24"}
    assert topo.server_addr() == "10.0.100.1"
    assert topo.nodeInfo("server")["defaultRoute"] == "via 10.0.100.254"
    assert topo.nodeInfo("s2")["dpid"] == "0000000000000002"


def test_multihomed_server_has_one_interface_per_path() -> None:
    topo = MultiHomedTopo(paths=[WIFI, G3], server_multihomed=True)
    assert sorted(topo.hosts()) == ["client", "server"]
    assert topo.server_addr("g3") == "10.0.2.2"
    plan = topo.path("g3")
    assert (plan.far_intf, plan.client_intf, plan.table) == ("server-eth1", "client-eth1", 102)


def test_access_link_carries_tclink_style_params_only_once() -> None:
    topo = MultiHomedTopo(paths=[WIFI])
    with_bw = [i for _a, _b, i in _links(topo) if "bw" in i]
    assert len(with_bw) == 1 and with_bw[0]["bw"] == 10.0 and with_bw[0]["delay"] == "10000us"


def test_setup_commands_give_each_path_its_table() -> None:
    cmds = MultiHomedTopo(paths=[WIFI, G3]).setup_commands()
    assert ("router", ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]) in cmds
    assert ("client", ["ip", "route", "replace", "default", "via", "10.0.2.254", "dev",
                       "client-eth1", "table", "102"]) in cmds
    assert ("client", ["ip", "rule", "add", "from", "10.0.2.1", "table", "102",
                       "priority", "102"]) in cmds
    multi = MultiHomedTopo(paths=[WIFI, G3], server_multihomed=True).setup_commands()
    assert ("client", ["ip", "route", "replace", "10.0.1.0/24", "dev", "client-eth0",
                       "scope", "link", "table", "101"]) in multi
    assert all(host != "router" for host, _ in multi)


def test_address_plan_is_disjoint_subnets() -> None:
    plan = address_plan(default_paths(3))
    assert [p.subnet for p in plan] == ["10.0.1.0/24", "10.0.2.0/24", "10.0.3.0/24"]
    assert len({p.switch for p in plan}) == 3


@pytest.mark.parametrize("paths, words", [
    ([], "at least one"),
    ([WIFI, WIFI], "used twice"),
    (default_paths(100), "at most 99"),
])
def test_bad_paths_are_refused(paths: list[PathSpec], words: str) -> None:
    with pytest.raises(InputError, match=words):
        MultiHomedTopo(paths=paths)


def test_path_names_are_checked_by_the_spec_type() -> None:
    with pytest.raises(ValidationError, match="should match pattern"):
        PathSpec(name="Wi Fi", bw=10_000_000)


def test_unknown_path_names_the_known_ones() -> None:
    with pytest.raises(InputError, match="wifi"):
        MultiHomedTopo(paths=[WIFI]).path("lte")


def test_mn_custom_entry_point() -> None:
    topo = topos["multipath"]("3")
    assert sorted(topo.switches()) == ["s1", "s2", "s3"]
    assert topos["multipath"](2, 1).server_multihomed
