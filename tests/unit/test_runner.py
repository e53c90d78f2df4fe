"""The runner's pure parts: topology, flows, addresses, captures, schedule, dry run."""

from __future__ import annotations

import copy

import pytest

from testbed.core.errors import SpecError
from testbed.core.units import parse_duration
from testbed.run.runner import (
    build_topology,
    capture_targets,
    check_against_topology,
    dry_run_commands,
    git_revision,
    host_addresses,
    in_parallel,
    mptcp_roles,
    parse_dpkg_status,
    parse_sysctl,
    path_addresses,
    ping_targets,
    plan_flows,
    resolve_addresses,
    schedule_events,
    topo_hosts,
    transport_settings,
)
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
    assert pings[0]["bind"] == "10.0.2.1" and pings[0]["dst_addr"] == "10.0.100.1"
    assert pings[0]["start"] == 1.0 and pings[0]["count"] == 20


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
    assert evs[0].bw == 1_000_000 and evs[0].up is None
    assert evs[1].up is False


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


def test_dry_run_records_the_commands_without_running_them(tmp_path):
    p = plan(MULTI)
    runner = dry_run_commands(p, tmp_path / p.run_id)
    kinds = {e.kind for e in runner.transcript.entries}
    assert kinds == {"dry-run"}
    text = runner.transcript.as_shell()
    assert "tc qdisc add dev s2-eth1 root handle 1: netem" in text
    assert "# in client: mnexec -a 0 sysctl -q -w net.ipv4.tcp_congestion_control=reno" \
        in text
    assert "ip mptcp endpoint add 10.0.2.1 dev client-eth1 signal" in text  # a download
    assert f"-w {tmp_path / p.run_id}/pcap/client-client-eth1.pcap" in text
    assert "raise SystemExit(main())' server --port 5001 --protocol tcp" in text
    assert "ping -D -O -n -i 0.1 -s 56 -W 1 -c 20 -I 10.0.2.1 10.0.100.1" in text
    assert "ip link set dev s1-eth1 down" not in text  # sent to a batch shell, at 5 s:
    assert "# at t = 5s on the run's clock (after its start):\nip -force -batch - <<'EOF'\n" \
           "link set dev s1-eth1 down\n" in text


def test_dry_run_shows_scheduled_batches_with_their_times_and_input(tmp_path):
    p = plan(MULTI)
    text = dry_run_commands(p, tmp_path / p.run_id).transcript.as_shell()
    at3 = text.index("# at t = 3s on the run's clock")
    at5 = text.index("# at t = 5s on the run's clock")
    assert at3 < at5  # in time order, not spec order
    block = text[at3:at5]
    assert block.count("tc -force -batch - <<'EOF'") == 1
    assert "qdisc change dev s2-eth1 parent 1:1 handle 2: tbf rate 1000000bit" in block
    assert block.rstrip().endswith("EOF")
    scheduled = [e for e in dry_run_commands(p, tmp_path).transcript.entries
                 if e.at is not None]
    assert [e.at for e in scheduled] == [3.0, 5.0]
    assert all(e.input for e in scheduled)


def test_dry_run_fattree(tmp_path):
    p = plan(FAT)
    text = dry_run_commands(p, tmp_path).transcript.as_shell()
    assert text.count("tcpdump -i") == 16
    assert "raise SystemExit(main())' client" in text
    assert "-m controllers ecmp --port 6653" in text and "nft -f -" not in text
    spray = copy.deepcopy(FAT)
    spray["controller"] = {"kind": "spray"}
    text = dry_run_commands(plan(spray), tmp_path).transcript.as_shell()
    assert "-m controllers spray --port 6653" in text
    assert "nft -f - <<'EOF'\ntable netdev mptb_spray_" in text  # the input, replayable
    assert "meta mark set numgen random mod 2" in text


def test_small_parsers(tmp_path):
    assert parse_sysctl("net.ipv4.tcp_rmem = 4096\t131072 6291456\nbad line\n") == {
        "net.ipv4.tcp_rmem": "4096\t131072 6291456"}
    status = ("Package: tshark\nStatus: install ok installed\nVersion: 4.0.17\n\n"
              "Package: mininet\nStatus: deinstall ok config-files\nVersion: 2.3.0-1\n\n"
              "Package: bash\nStatus: install ok installed\nVersion: 5.2\n")
    assert parse_dpkg_status(status) == {"tshark": "4.0.17"}
    (tmp_path / ".git" / "refs" / "heads").mkdir(parents=True)
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / ".git" / "refs" / "heads" / "main").write_text("abc123\n")
    assert git_revision(tmp_path) == "abc123"
    (tmp_path / ".git" / "refs" / "heads" / "main").unlink()
    (tmp_path / ".git" / "packed-refs").write_text("# pack\ndef456 refs/heads/main\n")
    assert git_revision(tmp_path) == "def456"
    assert git_revision(tmp_path / "nope") is None


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


def test_in_parallel_keeps_the_order_and_raises_the_first_error():
    assert in_parallel(lambda x: x * 2, list(range(10)), workers=3) == list(range(0, 20, 2))
    assert in_parallel(str, []) == [] and in_parallel(str, [7]) == ["7"]

    def boom(x: int) -> int:
        if x == 3:
            raise ValueError("host 3")
        return x

    with pytest.raises(ValueError, match="host 3"):
        in_parallel(boom, list(range(6)))


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


def test_dry_run_never_imports_or_builds_a_custom_topology(tmp_path, monkeypatch):
    marker = tmp_path / "imported"
    (tmp_path / "evil_topo.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "from mininet.topo import Topo\n"
        "class T(Topo):\n"
        "    def build(self, **_):\n"
        f"        open({str(marker)!r}, 'a').write('built')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    data = {"name": "c", "duration": "5s", "topology": {"kind": "evil_topo:T"},
            "workload": [{"kind": "ping", "src": "h1", "dst": "h2"}]}
    runner = dry_run_commands(plan(data), tmp_path / "run")
    assert runner.transcript.entries == [] and not marker.exists()
