"""The run's plan (`testbed.plan`): topology, flows, addresses, captures, schedule."""

from __future__ import annotations

import copy

import pytest

from testbed.core.errors import SpecError
from testbed.core.units import parse_duration
from testbed.plan.flows import plan_flows, resolve_addresses
from testbed.plan.netplan import plan_network
from testbed.plan.pings import off_path_switches, ping_targets
from testbed.plan.schedule import schedule_events
from testbed.plan.topology import (
    build_topology,
    capture_targets,
    check_against_topology,
    host_addresses,
    path_addresses,
    topo_hosts,
)
from testbed.plan.transport import mptcp_roles, transport_settings
from testbed.spec.linkshape import LinkShape
from testbed.spec.sweep import expand

MULTI = {
    "name": "m", "duration": "10s", "seed": 3,
    "topology": {"kind": "multipath", "paths": [
        {"name": "wifi", "bw": "10Mbit", "delay": "5ms", "queue": 50},
        {"name": "cell", "bw": "2Mbit", "delay": "30ms", "loss": "1%"}]},
    "transport": {"protocol": "tcp", "cc": "reno", "rmem": "64KiB"},
    "workload": [
        {"name": "down", "kind": "bulk", "src": "server", "dst": "client", "size": "1MB",
         "via": "cell"},
        {"name": "up", "kind": "bulk", "src": "client", "dst": "server", "duration": "2s",
         "via": "wifi", "parallel": 2},
        {"name": "mp", "kind": "bulk", "src": "server", "dst": "client", "protocol": "mptcp"},
        {"name": "x", "kind": "cbr", "src": "client", "dst": "server", "rate": "500kbit"},
        {"name": "rtt", "kind": "ping", "src": "client", "dst": "server", "via": "cell",
         "interval": "100ms", "count": 20, "start": "1s"},
    ],
    "schedule": [{"at": "5s", "link": "wifi", "down": True},
                 {"at": "3s", "link": "cell", "bw": "1Mbit"}],
    "capture": {"hosts": ["client"]},
}

FAT = {
    "name": "f", "duration": "10s", "seed": 1,
    "topology": {"kind": "fattree", "k": 4, "bw": "10Mbit", "delay": "25us", "queue": 100},
    "workload": [
        {"name": "inc", "kind": "flows", "pattern": "incast", "src": ["S0", "S4", "S8"],
         "dst": "S15", "size": "1MB", "count": 2, "interval": "100ms"},
        {"name": "rnd", "kind": "flows", "pattern": "random", "count": 5, "size": "200KB"},
        {"name": "perm", "kind": "flows", "pattern": "permutation", "size": "100KB",
         "hosts": ["S0", "S1", "S2", "S3"]},
    ],
    "schedule": [{"at": "2s", "link": "E0-A0", "down": True}],
}


def plan(data, i=0):
    return expand(copy.deepcopy(data), "t.toml")[i]


def test_multipath_topology_and_names():
    p = plan(MULTI)
    topo = build_topology(p.spec)
    assert {"client", "server", "router"} <= set(topo.hosts())
    assert topo_hosts(p.spec, topo) == ["client", "server"]
    check_against_topology(p.spec, topo)
    shape = topo.paths[1].shape
    assert (shape.bw_bps, shape.delay_s, shape.loss_pct) == (2_000_000, 0.03, 1.0)
    assert topo.paths[0].shape.queue_pkts == 50


def test_fattree_topology_and_link_check():
    p = plan(FAT)
    topo = build_topology(p.spec)
    assert len(topo.hosts()) == 16 and len(topo.switches()) == 20
    check_against_topology(p.spec, topo)
    assert topo.linkInfo("E0", "A0")["shape"] == LinkShape(
        bw_bps=10_000_000, delay_s=parse_duration("25us"), queue_pkts=100)
    plain = copy.deepcopy(FAT)
    plain["topology"] = {"kind": "fattree", "k": 4}
    assert "shape" not in build_topology(plan(plain).spec).linkInfo("E0", "A0")
    bad = copy.deepcopy(FAT)
    bad["schedule"][0]["link"] = "A0-E0"   # upper node first: not a link name
    with pytest.raises(SpecError, match=r"schedule\[0\].link"):
        check_against_topology(plan(bad).spec, build_topology(plan(bad).spec))
    # an unshaped fat-tree has nothing a schedule could change: say which keys give it
    plain["schedule"] = copy.deepcopy(FAT["schedule"])
    with pytest.raises(SpecError) as err:
        check_against_topology(plan(plain).spec, build_topology(plan(plain).spec))
    assert str(err.value).endswith("this topology has no shaped link for a schedule to "
                                   "change; set the fat-tree's bw, delay, loss or queue")


def test_custom_topology_is_imported():
    data = {"name": "c", "duration": "5s",
            "topology": {"kind": "topologies.pair:PairTopo"},
            "workload": [{"kind": "ping", "src": "h1", "dst": "h2"}]}
    p = plan(data)
    topo = build_topology(p.spec)
    assert sorted(topo.hosts()) == ["h1", "h2"]
    data["topology"]["kind"] = "topologies.pair:NoSuch"
    with pytest.raises(SpecError, match=r"topology\.kind"):
        build_topology(plan(data).spec)
    data["topology"] = {"kind": "topologies.pair:PairTopo"}
    data["workload"][0]["dst"] = "h3"
    with pytest.raises(SpecError, match=r"workload\[0\].dst"):
        check_against_topology(plan(data).spec, build_topology(plan(data).spec))


def test_flows_from_every_workload_kind():
    p = plan(MULTI)
    flows = plan_flows(p.spec, p.seed, ["client", "server"])
    by = {f.flow_id: f for f in flows}
    assert sorted(by) == ["down-0", "mp-0", "up-0", "up-1", "x-0"]
    assert by["down-0"].protocol == "tcp" and by["down-0"].size_bytes == 1_000_000
    assert by["mp-0"].protocol == "mptcp" and by["mp-0"].size_bytes is None
    assert by["up-1"].duration_s == 2.0
    assert by["x-0"].protocol == "udp" and by["x-0"].rate_bps == 500_000


def test_pinned_flows_use_the_path_address_of_the_client():
    p = plan(MULTI)
    topo = build_topology(p.spec)
    flows = resolve_addresses(plan_flows(p.spec, p.seed, ["client", "server"]),
                              host_addresses(topo), path_addresses(p.spec, topo))
    by = {f.flow_id: f for f in flows}
    assert (by["down-0"].dst_addr, by["down-0"].bind_addr) == ("10.0.2.1", "10.0.100.1")
    assert (by["up-0"].dst_addr, by["up-0"].bind_addr) == ("10.0.100.1", "10.0.1.1")
    assert by["mp-0"].dst_addr == "10.0.1.1" and by["mp-0"].bind_addr is None
    pings = ping_targets(p.spec, host_addresses(topo), path_addresses(p.spec, topo))
    assert pings[0].bind == "10.0.2.1" and pings[0].dst_addr == "10.0.100.1"
    assert pings[0].start == 1.0 and pings[0].count == 20


def test_patterns_use_derived_seeds():
    p1, p2 = expand({**copy.deepcopy(FAT), "repetitions": 2}, "t.toml")
    hosts = [f"S{i}" for i in range(16)]
    f1 = plan_flows(p1.spec, p1.seed, hosts)
    f2 = plan_flows(p2.spec, p2.seed, hosts)
    again = plan_flows(p1.spec, p1.seed, hosts)
    inc = [f for f in f1 if f.workload == "inc"]
    assert [(f.src, f.dst, f.start_s) for f in inc] == [("S0", "S15", 0.0),
                                                          ("S4", "S15", 0.1)]
    rnd = lambda fl: [(f.src, f.dst) for f in fl if f.workload == "rnd"]  # noqa: E731
    assert len(rnd(f1)) == 5 and rnd(f1) == rnd(again) and rnd(f1) != rnd(f2)
    perm = [f for f in f1 if f.workload == "perm"]
    assert sorted(f.src for f in perm) == ["S0", "S1", "S2", "S3"]
    assert all(f.src != f.dst for f in perm)


def test_transport_is_mptcp_when_a_workload_needs_it():
    p = plan(MULTI)
    ts = transport_settings(p.spec)
    assert ts.protocol == "mptcp" and ts.cc == "reno" and ts.rmem == 65536
    data = copy.deepcopy(MULTI)
    data["workload"] = [w for w in data["workload"] if w["name"] != "mp"]
    assert transport_settings(plan(data).spec).protocol == "tcp"


def test_schedule_events_sorted_with_base_units():
    evs = schedule_events(plan(MULTI).spec)
    assert [(e.at, e.link) for e in evs] == [(3.0, "cell"), (5.0, "wifi")]
    assert evs[0].bw == 1_000_000 and evs[0].link_up is None
    assert evs[1].link_up is False


def test_capture_targets():
    p = plan(MULTI)
    topo = build_topology(p.spec)
    assert capture_targets(p.spec, topo, ["client", "server"]) == [
        ("client", "client-eth0"), ("client", "client-eth1")]
    data = copy.deepcopy(MULTI)
    data["capture"] = {"enabled": False}
    assert capture_targets(plan(data).spec, topo, ["client", "server"]) == []
    data["capture"] = {"interfaces": ["server-eth9"]}
    with pytest.raises(SpecError, match=r"capture\.interfaces"):
        capture_targets(plan(data).spec, topo, ["client", "server"])


def test_mptcp_roles_follow_who_opens_the_connections():
    p = plan(MULTI)
    flows = plan_flows(p.spec, p.seed, ["client", "server"])
    # the only MPTCP flow is a download: the client accepts and announces its paths
    assert mptcp_roles(p.spec, flows, ["client", "server"]) == {"client": "server",
                                                               "server": "server"}
    data = copy.deepcopy(MULTI)
    data["workload"][2].update(src="client", dst="server")   # an upload
    p = plan(data)
    flows = plan_flows(p.spec, p.seed, ["client", "server"])
    assert mptcp_roles(p.spec, flows, ["client", "server"])["client"] == "client"
    pf = plan(FAT)
    assert set(mptcp_roles(pf.spec, [], ["S0", "S1"]).values()) == {"client"}


@pytest.mark.parametrize("kind", ["subprocess:getoutput", "os:system",
                                  "testbed.core.errors:SpecError", "topologies:pair"])
def test_custom_topology_must_be_a_topo_class_and_is_never_called_otherwise(kind, tmp_path):
    marker = tmp_path / "ran"
    data = {"name": "c", "duration": "5s",
            "topology": {"kind": kind, "params": {"cmd": f"touch {marker}",
                                                  "command": f"touch {marker}"}},
            "workload": [{"kind": "ping", "src": "h1", "dst": "h2"}]}
    with pytest.raises(SpecError, match=r"topology\.kind: .* is not a Mininet Topo subclass"):
        build_topology(plan(data).spec)
    assert not marker.exists()


def test_network_plan_holds_what_the_run_does():
    p = plan(MULTI)
    np_ = plan_network(p)
    assert (np_.run_id, np_.seed, np_.spec) == (p.run_id, p.seed, p.spec)
    assert np_.hosts == ("client", "server")
    assert sorted(f.flow_id for f in np_.flows) == ["down-0", "mp-0", "up-0", "up-1", "x-0"]
    assert all(f.dst_addr for f in np_.flows)
    assert [pg.name for pg in np_.pings] == ["rtt"]
    assert np_.addr_of["server"] == "10.0.100.1"
    assert np_.path_addrs[("client", "cell")] == "10.0.2.1"
    assert np_.roles == {"client": "server", "server": "server"}
    assert np_.captures == (("client", "client-eth0"), ("client", "client-eth1"))
    assert np_.transport.protocol == "mptcp"
    assert [(e.at, e.link) for e in np_.events] == [(3.0, "cell"), (5.0, "wifi")]
    bad = copy.deepcopy(MULTI)
    bad["schedule"][0]["link"] = "wlan"
    with pytest.raises(SpecError, match=r"schedule\[0\].link"):
        plan_network(plan(bad))


def test_a_ping_leaves_out_the_other_paths_switches():
    p = plan(MULTI)
    topo = build_topology(p.spec)
    assert off_path_switches(p.spec, topo, "cell") == {"s1"}
    assert off_path_switches(p.spec, topo, "wifi") == {"s2"}
    assert off_path_switches(p.spec, topo, None) == {"s2"}  # unpinned: path 0
    pf = plan(FAT)
    assert off_path_switches(pf.spec, build_topology(pf.spec), None) == frozenset()
