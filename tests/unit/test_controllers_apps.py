"""The os-ken apps driven by a fake datapath; the messages they send vs JSON golden files.

Golden files (``tests/data/controllers/<app>_k4.json``) hold, for k=4, every message sent
to one switch per level (E0, A0, C0) in full (os-ken's ``to_jsondict``), and for all 20
switches the count of flow-mods / group-mods and a SHA-256 of their wire encoding.
Regenerate after an intended change with ``UPDATE_GOLDEN=1 .venv/bin/pytest <this file>``
and review the diff.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from os_ken.base.app_manager import AppManager
from os_ken.controller import ofp_event
from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser

from controllers.base import FabricContext, missing_ports
from controllers.ecmp import EcmpApp
from controllers.paths import compute_routes
from controllers.registry import APPS
from controllers.rules import POLICIES, spray_nft_script
from controllers.single_path import SinglePathApp
from controllers.spray import SprayApp
from topologies.fattree import fattree_layout

DATA = Path(__file__).resolve().parents[1] / "data" / "controllers"
FULL = ("E0", "A0", "C0")
CLASSES = {"single_path": SinglePathApp, "ecmp": EcmpApp, "spray": SprayApp}


class FakeDatapath:
    """Records what an app sends, like os-ken's Datapath (xid assignment + serialize)."""

    ofproto = ofproto_v1_3
    ofproto_parser = ofproto_v1_3_parser

    def __init__(self, dpid: int):
        self.id = dpid
        self.sent: list[Any] = []
        self.xid = 0

    def set_xid(self, msg: Any) -> int:
        self.xid += 1
        msg.set_xid(self.xid)
        return self.xid

    def send_msg(self, msg: Any) -> None:
        if msg.xid is None:
            self.set_xid(msg)
        msg.serialize()  # must encode
        self.sent.append(msg)


def connect(app: Any, dpid: int) -> FakeDatapath:
    dp = FakeDatapath(dpid)
    features = ofproto_v1_3_parser.OFPSwitchFeatures(dp, datapath_id=dpid)
    app.on_switch_features(ofp_event.EventOFPSwitchFeatures(features))
    return dp


def message_kind(msg: Any) -> str:
    return type(msg).__name__


def canonical(msg: Any) -> str:
    return json.dumps(msg.to_jsondict(), sort_keys=True, separators=(",", ":"))


@pytest.fixture(scope="module")
def routes():
    return compute_routes(fattree_layout(4))


def run_app(name: str, routes, status: Path | None = None) -> tuple[Any, dict[str, list[Any]]]:
    app = CLASSES[name](fabric=FabricContext(routes, status))
    sent = {sw.name: connect(app, sw.dpid).sent for sw in routes.layout.switches}
    return app, sent


@pytest.fixture(scope="module")
def sent_by_app(routes) -> dict[str, dict[str, list[Any]]]:
    return {name: run_app(name, routes)[1] for name in CLASSES}


def golden_text(sent: dict[str, list[Any]]) -> str:
    """One message per line, so diffs stay readable."""
    lines = ["{", ' "digests": {']
    items = []
    for name, msgs in sent.items():
        kinds = [message_kind(m) for m in msgs]
        digest = hashlib.sha256(b"".join(bytes(m.buf) for m in msgs)).hexdigest()
        items.append(f'  "{name}": {{"flow_mods": {kinds.count("OFPFlowMod")}, '
                     f'"group_mods": {kinds.count("OFPGroupMod")}, '
                     f'"barriers": {kinds.count("OFPBarrierRequest")}, "sha256": "{digest}"}}')
    lines.append(",\n".join(items))
    lines += [" },", ' "messages": {']
    blocks = []
    for name in FULL:
        body = ",\n".join("   " + canonical(m) for m in sent[name])
        blocks.append(f'  "{name}": [\n{body}\n  ]')
    lines.append(",\n".join(blocks))
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_messages_match_golden(name: str, sent_by_app) -> None:
    text = golden_text(sent_by_app[name])
    path = DATA / f"{name}_k4.json"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    want = json.loads(path.read_text())
    got = json.loads(text)
    for sw, digest in want["digests"].items():
        assert got["digests"][sw] == digest, f"{name}: messages for {sw} changed"
    for sw in FULL:
        assert got["messages"][sw] == want["messages"][sw], f"{name}: {sw} differs"
    assert got == want


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_message_structure(name: str, routes, sent_by_app) -> None:
    sent = sent_by_app[name]
    for sw in routes.layout.switches:
        msgs = sent[sw.name]
        kinds = [message_kind(m) for m in msgs]
        # reset first (delete flows, delete groups), barrier last
        assert kinds[:2] == ["OFPFlowMod", "OFPGroupMod"]
        assert msgs[0].command == ofproto_v1_3.OFPFC_DELETE
        assert kinds[-1] == "OFPBarrierRequest" and kinds.count("OFPBarrierRequest") == 1
        adds = [m for m in msgs if message_kind(m) == "OFPFlowMod"
                and m.command == ofproto_v1_3.OFPFC_ADD]
        ipv4 = [m for m in adds if m.priority == 200]
        arp = [m for m in adds if m.priority == 100]
        assert any(m.priority == 0 and not m.instructions for m in adds)  # table-miss drop
        assert len(arp) == (16 if sw.level == 1 else 0)
        multi = sum(1 for p in routes.hops[sw.name].values() if len(p) > 1)
        expected = 16 + (multi if name == "spray" else 0)  # spray: 2 marks per choice
        assert len(ipv4) == expected, sw.name
        groups = [m for m in msgs if message_kind(m) == "OFPGroupMod"][1:]
        if name == "ecmp" and sw.level < 3:
            assert len(groups) == 1 and len(groups[0].buckets) == 2
            assert groups[0].type == ofproto_v1_3.OFPGT_SELECT
        else:
            assert groups == []


def test_single_path_uses_one_port_per_destination_and_all_cores(routes) -> None:
    used_cores = set()
    for src in routes.layout.hosts:
        for dst in routes.layout.hosts:
            if src.switch == dst.switch:
                continue
            path = [src.switch]
            node = src.switch
            while True:
                rule = next(r for r in POLICIES["single_path"](routes, node)
                            if r["kind"] == "flow" and r["match"].get("ipv4_dst") == dst.ip)
                port = rule["actions"][0]["port"]
                nxt = routes.adj.ports[node][port]
                if nxt == dst.name:
                    break
                path.append(nxt)
                node = nxt
            assert tuple(path) in routes.paths(src.name, dst.name)
            used_cores |= {s for s in path if s.startswith("C")}
    assert used_cores == {"C0", "C1", "C2", "C3"}


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_reconnect_refreshes_without_wiping(name: str, routes) -> None:
    app = CLASSES[name](fabric=FabricContext(routes, None))
    first = connect(app, 0x10000).sent
    again = connect(app, 0x10000).sent
    ofp = ofproto_v1_3
    assert not any(message_kind(m) == "OFPFlowMod" and m.command == ofp.OFPFC_DELETE
                   for m in again)
    assert not any(message_kind(m) == "OFPGroupMod" and m.command == ofp.OFPGC_DELETE
                   for m in again)
    assert len(again) == len(first) - 2                 # the reset pair is gone
    groups = [m for m in again if message_kind(m) == "OFPGroupMod"]
    assert all(m.command == ofp.OFPGC_MODIFY for m in groups)
    assert len(groups) == (1 if name == "ecmp" else 0)


def test_spray_marks_cover_every_next_hop(routes) -> None:
    for rule in POLICIES["spray"](routes, "E0"):
        if rule["kind"] == "flow" and "pkt_mark" in rule["match"]:
            assert rule["actions"] == [{"type": "output",
                                        "port": 3 + rule["match"]["pkt_mark"]}]


def test_spray_nft_scripts(routes) -> None:
    got = {sw.name: spray_nft_script(routes, sw.name) for sw in routes.layout.switches}
    assert sorted(n for n, s in got.items() if s) == sorted(
        [f"A{i}" for i in range(8)] + [f"E{i}" for i in range(8)])
    path = DATA / "spray_nft_E0.nft"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(got["E0"])
    assert got["E0"] == path.read_text()
    assert '"A5-eth2"' in got["A5"] and "eth3" not in got["A5"]


def test_ready_after_matching_barrier_reply(routes, tmp_path: Path) -> None:
    status = tmp_path / "status.jsonl"
    app = SprayApp(fabric=FabricContext(routes, status))
    dp = connect(app, 0x10000)
    barrier = dp.sent[-1]
    other = ofproto_v1_3_parser.OFPBarrierReply(dp)
    other.xid = barrier.xid + 100
    app.on_barrier_reply(ofp_event.EventOFPBarrierReply(other))
    reply = ofproto_v1_3_parser.OFPBarrierReply(dp)
    reply.xid = barrier.xid
    app.on_barrier_reply(ofp_event.EventOFPBarrierReply(reply))
    events = [json.loads(line) for line in status.read_text().splitlines()]
    assert [e["event"] for e in events] == ["programming", "ready"]
    assert events[1]["switch"] == "E0" and events[1]["messages"] == len(dp.sent) - 1


def test_features_handled_before_os_ken_sets_the_datapath_id(routes, tmp_path: Path) -> None:
    # os-ken's receive thread queues the features event, then sets dp.id; with the native
    # hub the app's thread can take the event first and see dp.id None.  Unknown DPIDs too
    # are reported from the message.
    status = tmp_path / "status.jsonl"
    app = SinglePathApp(fabric=FabricContext(routes, status))
    for dpid in (0x10000, 0x99):
        dp = FakeDatapath(dpid)
        dp.id = None  # type: ignore[assignment]
        features = ofproto_v1_3_parser.OFPSwitchFeatures(dp, datapath_id=dpid)
        app.on_switch_features(ofp_event.EventOFPSwitchFeatures(features))
    events = [json.loads(line) for line in status.read_text().splitlines()]
    assert [(e["event"], e["dpid"]) for e in events] == [("programming", 0x10000),
                                                          ("error", 0x99)]
    assert events[0]["switch"] == "E0" and 0x10000 in app.pending
    assert "0000000000000099 is not in the layout" in events[1]["detail"]


def test_unknown_switch_and_switch_errors_are_reported(routes, tmp_path: Path) -> None:
    status = tmp_path / "status.jsonl"
    app = EcmpApp(fabric=FabricContext(routes, status))
    dp = connect(app, 0x99)
    assert dp.sent == []
    err = ofproto_v1_3_parser.OFPErrorMsg(FakeDatapath(0x30000), type_=1, code=2)
    err.xid = 7
    app.on_error(ofp_event.EventOFPErrorMsg(err))
    events = [json.loads(line) for line in status.read_text().splitlines()]
    assert [e["event"] for e in events] == ["error", "error"]
    assert "not in the layout" in events[0]["detail"] and events[1]["switch"] == "C0"


def test_port_check(routes, tmp_path: Path) -> None:
    assert missing_ports([1, 2, 3, 4], [1, 2, 4, 0xFFFFFFFE]) == [3]
    status = tmp_path / "status.jsonl"
    app = EcmpApp(fabric=FabricContext(routes, status))
    dp = FakeDatapath(0x10000)
    ports = [ofproto_v1_3_parser.OFPPort(port_no=n, hw_addr="00:00:00:00:00:01", name=b"x",
                                         config=0, state=0, curr=0, advertised=0,
                                         supported=0, peer=0, curr_speed=0, max_speed=0)
             for n in (1, 2, 4)]
    reply = ofproto_v1_3_parser.OFPPortDescStatsReply(dp, body=ports, flags=0)
    app.on_port_desc(ofp_event.EventOFPPortDescStatsReply(reply))
    events = [json.loads(line) for line in status.read_text().splitlines()]
    assert events[0]["event"] == "error" and "[3]" in events[0]["detail"]


@pytest.mark.parametrize("name", sorted(APPS))
def test_apps_load_through_os_ken(name: str) -> None:
    cls = AppManager().load_app(APPS[name])
    assert cls is CLASSES[name]
    assert cls.OFP_VERSIONS == [ofproto_v1_3.OFP_VERSION]
