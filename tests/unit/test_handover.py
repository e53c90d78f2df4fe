"""P3's hand-over schemes without a kernel: the spec rules, the restart ICMP, the
notifier's choice of events, the agent's handling and the log parser.  The programs on a
real kernel: tests/integration/test_handover.py."""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from scapy.layers.inet import ICMP, IP, TCP

from testbed.core.errors import InputError, SpecError
from testbed.host.handover import agent
from testbed.host.handover.icmp import (
    KEY,
    SOCK,
    SockState,
    decode_sock,
    frag_needed,
    signal_value,
)
from testbed.host.handover.log import parse_handover_dump
from testbed.host.handover.notifier import is_handoff, undone_restarts
from testbed.plan.transport import transport_settings
from testbed.run.preflight import bpf_ccs
from testbed.spec.load import load_spec
from testbed.spec.model import ScheduleEvent

SPEC = """
name = "h"
duration = "5s"
[topology]
kind = "multipath"
paths = [{{ name = "access", bw = "10Mbit", delay = "1ms" }}]
[transport]
protocol = "{protocol}"
cc = "{cc}"
handover = "{handover}"
[[workload]]
kind = "bulk"
src = "client"
dst = "server"
{extra}
{schedule}
"""
OUTAGE = """
[[schedule]]
at = "2s"
link = "access"
down = true
[[schedule]]
at = "3s"
link = "access"
up = true
"""


def write(tmp: Path, handover: str, cc: str = "reno", protocol: str = "tcp",
          extra: str = "", schedule: str = OUTAGE) -> Path:
    p = tmp / "s.toml"
    p.write_text(SPEC.format(protocol=protocol, cc=cc, handover=handover, extra=extra,
                             schedule=schedule))
    return p


@pytest.mark.parametrize(("scheme", "kernel_cc"), [("none", "reno"),
                                                   ("immediate-expiration", "reno_ie"),
                                                   ("bandwidth-aware", "reno_bwa")])
def test_a_scheme_runs_its_newreno_variant(tmp_path: Path, scheme: str,
                                           kernel_cc: str) -> None:
    exp = load_spec(write(tmp_path, scheme))
    assert exp.transport.kernel_cc() == kernel_cc
    assert transport_settings(exp).cc == kernel_cc
    assert bpf_ccs(exp) == ([] if scheme == "none" else [kernel_cc])


def test_a_scheme_needs_newreno_on_plain_tcp(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"transport.handover: 'bandwidth-aware' is a "
                       r"NewReno variant .* set transport.cc = \"reno\" \(it is 'cubic'\)"):
        load_spec(write(tmp_path, "bandwidth-aware", cc="cubic"))
    with pytest.raises(SpecError, match=r"runs on plain TCP senders"):
        load_spec(write(tmp_path, "immediate-expiration", protocol="mptcp"))
    with pytest.raises(SpecError, match=r"workload\[0\]: its own cc/protocol would bypass"):
        load_spec(write(tmp_path, "immediate-expiration", extra='cc = "cubic"'))
    with pytest.raises(SpecError, match=r"'reno_ie' is chosen with transport\.handover"):
        load_spec(write(tmp_path, "none", cc="reno_ie"))
    with pytest.raises(SpecError, match=r"transport\.handover"):
        load_spec(write(tmp_path, "immediate"))
    # no event to act at: the scheme could never act, and the run looked like TCP's
    with pytest.raises(SpecError, match=r"transport\.handover: 'immediate-expiration' acts "
                       r"at the schedule's events .* this spec has none"):
        load_spec(write(tmp_path, "immediate-expiration", schedule=""))
    load_spec(write(tmp_path, "none", schedule=""))


def sock(**kw: Any) -> SockState:
    base = {"saddr": "10.0.1.1", "daddr": "10.0.100.1", "sport": 43464, "dport": 5001,
            "snd_una": 3479545, "snd_nxt": 3579545, "mss": 1448, "hdr_len": 32,
            "packets_out": 69, "ca_state": 4, "t_ns": 5}
    return SockState(**{**base, **kw})


def test_a_published_socket_is_decoded_from_the_map_bytes() -> None:
    key = KEY.pack(bytes([10, 0, 1, 1]), bytes([10, 0, 100, 1]), (43464).to_bytes(2, "big"),
                   (5001).to_bytes(2, "big"))
    value = SOCK.pack(3479545, 3579545, 1448, 32, 69, 4, 5, 0, 0)
    assert decode_sock(key, value) == sock()
    assert len(value) == 40 and len(key) == 12  # struct ho_sock, struct ho_key
    undone = SOCK.pack(3479545, 3579545, 1448, 32, 69, 0, 5, 3, 0)
    assert decode_sock(key, undone) == sock(ca_state=0, undone_gen=3)
    assert struct.unpack("<QQ", signal_value(3, 77)) == (3, 77)


def test_the_restart_icmp_quotes_the_oldest_unacknowledged_byte() -> None:
    s = sock()
    pkt = IP(frag_needed(s))
    assert (pkt.src, pkt.dst) == ("10.0.100.1", "10.0.1.1")
    icmp = pkt[ICMP]
    assert (icmp.type, icmp.code, icmp.nexthopmtu) == (3, 4, 1448 + 32 + 20 - 8)
    inner = IP(bytes(icmp.payload))
    assert (inner.src, inner.dst) == ("10.0.1.1", "10.0.100.1")
    tcp = TCP(bytes(inner.payload)[:8] + bytes(12))  # the quote holds the first 8 bytes
    assert (tcp.sport, tcp.dport, tcp.seq) == (43464, 5001, 3479545)
    # 1000-byte segments without options (the 2006 profile) shrink to 992 bytes
    assert sock(mss=1000, hdr_len=20).restart_mtu() == 1032
    assert sock(mss=500, hdr_len=20).restart_mtu() == 552  # never below the kernel's floor


def test_only_sockets_with_data_in_flight_are_restarted() -> None:
    assert sock().in_flight
    assert not sock(packets_out=0, snd_nxt=3479545).in_flight


class FakeSocks:
    """``ho_socks`` as the notifier's watcher reads it (keys, lookup), from states."""

    def __init__(self, states: list[SockState]):
        self.map = {KEY.pack(*(bytes(int(x) for x in a.split(".")) for a in
                               (s.saddr, s.daddr)), s.sport.to_bytes(2, "big"),
                             s.dport.to_bytes(2, "big")):
                    SOCK.pack(s.snd_una, s.snd_nxt, s.mss, s.hdr_len, s.packets_out,
                              s.ca_state, s.t_ns, s.undone_gen, 0) for s in states}

    def keys(self) -> list[bytes]:
        return list(self.map)

    def lookup(self, key: bytes) -> bytes | None:
        return self.map.get(key)


def test_a_socket_whose_restart_linux_undid_is_restarted_once_more() -> None:
    undone = sock(sport=1, ca_state=0, undone_gen=2)
    socks = FakeSocks([undone, sock(sport=2), sock(sport=3, undone_gen=1),
                       sock(sport=4, undone_gen=2, packets_out=0, snd_nxt=3479545)])
    # only the socket of this hand-off (2), with data in flight, not yet sent again
    assert undone_restarts(socks, 2, set()) == [undone]
    assert undone_restarts(socks, 2, {("10.0.1.1", 1, "10.0.100.1", 5001)}) == []
    assert undone_restarts(socks, 1, set()) == [sock(sport=3, undone_gen=1)]
    # the program keeps the generation's low 32 bits
    assert undone_restarts(FakeSocks([sock(undone_gen=5)]), 2**32 + 5, set())


def test_the_sender_hears_of_an_interface_when_it_is_there() -> None:
    assert not is_handoff(ScheduleEvent(at=3, link="access", down=True))
    assert is_handoff(ScheduleEvent(at=3.5, link="access", down=False, bw="384kbit",
                                    delay="70ms"))
    assert is_handoff(ScheduleEvent(at=3, link="access", bw="384kbit"))
    assert not is_handoff(ScheduleEvent(at=3, link="access", loss="1%"))
    # ``up`` is ``down`` the other way round (spec.md): it was not a hand-off at all
    assert is_handoff(ScheduleEvent(at=3.5, link="access", up=True))
    assert is_handoff(ScheduleEvent(at=3.5, link="access", down=False))
    assert not is_handoff(ScheduleEvent(at=3, link="access", up=False))


class RecordingSocket:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, tuple[str, int]]] = []

    def sendto(self, data: bytes, addr: tuple[str, int]) -> None:
        self.sent.append((data, addr))


def test_the_agent_sends_only_for_its_own_addresses() -> None:
    raw = RecordingSocket()
    mine = sock()
    theirs = sock(saddr="10.9.9.9")
    local = {"10.0.1.1": True, "10.9.9.9": False}
    flushed: list[bool] = []
    reply = agent.handle("send " + json.dumps([dataclasses.asdict(mine),
                                               dataclasses.asdict(theirs)]), raw, local,
                         after_send=lambda: flushed.append(True))
    assert [r["src"] for r in reply["sent"]] == ["10.0.1.1"]
    assert [r["src"] for r in reply["skipped"]] == ["10.9.9.9"]
    assert raw.sent == [(frag_needed(mine), ("10.0.1.1", 0))]
    assert flushed == [True]      # the lowered path MTU is forgotten once the ICMPs are out
    assert agent.handle("dance", raw, local) == {"error": "unknown command 'dance'"}
    assert agent.is_local("127.0.0.1", {}) and not agent.is_local("192.0.2.77", {})


def _rec(**kw: int) -> dict[str, Any]:
    base = {"seq": 1, "gen": 1, "t_signal_ns": 10**9, "t_restart_ns": 10**9,
            "t_done_ns": 2 * 10**9, "t_seen_ns": 10**9 + 145 * 10**6, "una_seen": 7,
            "key": {"saddr": int.from_bytes(bytes([10, 0, 1, 1]), "little"),
                    "daddr": int.from_bytes(bytes([10, 0, 100, 1]), "little"),
                    "sport": int.from_bytes((43464).to_bytes(2, "big"), "little"),
                    "dport": int.from_bytes((5001).to_bytes(2, "big"), "little")},
            "scheme": 2, "path": 2, "ca_state": 4, "cwnd_before": 1, "ssthresh_before": 25,
            "mss": 1448, "rtt_us": 150000, "lag_us": 30000, "acked": 1448, "ssthresh": 5,
            "undone": 1, "cwnd_redo": 47}
    return {**base, **kw}


def test_the_log_gives_each_hand_off_with_its_estimate() -> None:
    dump = json.dumps([{"key": 1, "value": _rec(seq=2, gen=2)}, {"key": 0, "value": _rec()},
                       {"key": 2, "value": {**_rec(), "seq": 0}}])
    rows = parse_handover_dump(dump, "reno_bwa", 100.0)
    assert [r["seq"] for r in rows] == [1, 2]
    r = rows[0]
    assert (r["src"], r["sport"], r["dst"], r["dport"]) == ("10.0.1.1", 43464, "10.0.100.1",
                                                            5001)
    assert (r["scheme"], r["path"], r["ssthresh"]) == ("bandwidth-aware", "loss", 5)
    assert r["bw_bps"] == round(1448 * 8 / 0.03)   # one segment per 30 ms: 386 kbit/s
    assert r["t_signal"] == 101.0 and r["t_done"] == 102.0
    assert r["t_seen"] == 101.145 and r["una_seen"] == 7 and r["undone"] == 1
    assert r["cwnd_redo"] == 47
    ie = parse_handover_dump(json.dumps([{"key": 0, "value": _rec(scheme=1, path=1)}]),
                             "reno_ie", 0.0)[0]
    assert ie["scheme"] == "immediate-expiration" and "bw_bps" not in ie
    with pytest.raises(InputError):
        parse_handover_dump("{}", "reno_ie", 0.0)


def test_keep_neighbours_is_written_every_run_either_way() -> None:
    from testbed.host.mptcp import neighbour_sysctls

    def every(key: str) -> bool:
        return True

    assert set(neighbour_sysctls(True, every).values()) == {0}
    assert set(neighbour_sysctls(False, every).values()) == {1}   # the kernel's default
    assert set(neighbour_sysctls(True, every)) == {
        "net.ipv4.conf.all.arp_evict_nocarrier", "net.ipv6.conf.all.ndisc_evict_nocarrier"}
    assert neighbour_sysctls(True, lambda key: False) == {}   # before 5.16: nothing to set


def test_the_programs_redo_window_matches_the_notifiers_watch() -> None:
    """`ho_redo` acts on an entry into Loss only while the notifier still watches for an
    undo (after that it is Linux's own): the two constants must agree."""
    import re

    from testbed.host.handover import notifier

    header = (Path(notifier.__file__).parents[1] / "coupled" / "bpf" /
              "handover.h").read_text()
    ns = int(re.search(r"#define HO_UNDO_WATCH_NS (\d+)ULL", header).group(1))
    assert ns == round(notifier.UNDO_WATCH_S * 1e9)
