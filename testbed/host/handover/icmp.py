"""What the notifier sends a sender at a hand-off, built from what the BPF program
publishes about each socket (``ho_socks``, see ``handover.h``).  Pure: tested offline.

The message is an ICMP "destination unreachable / fragmentation needed" (type 3, code 4)
quoting the socket's own segment at ``snd_una`` and an MTU 8 bytes below what the
socket's segments need now.  Linux (``tcp_v4_err`` -> ``tcp_v4_mtu_reduced`` ->
``tcp_simple_retransmit``, 6.1) then shrinks the segment size, marks every segment in
flight that is larger than the new one lost and retransmits at once, whatever state
the retransmission timer is in.  Conditions the kernel checks and this module meets: the
quoted sequence number lies in [snd_una, snd_nxt]; the MTU is at least 552 and below the
socket's path MTU; the route's MTU is not locked.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

KEY = struct.Struct("<4s4s2s2s")           # struct ho_key: addresses and ports as on the wire
SOCK = struct.Struct("<IIIIIIQII")         # struct ho_sock
SIGNAL = struct.Struct("<QQ")              # struct ho_signal
MTU_STEP = 8                               # bytes the segment size shrinks per hand-off
MIN_PMTU = 552                             # net.ipv4.route.min_pmtu's default
IPV4_HEADER = 20


@dataclass(frozen=True)
class SockState:
    """One socket as the program last saw it (on its latest ACK)."""

    saddr: str
    daddr: str
    sport: int
    dport: int
    snd_una: int
    snd_nxt: int
    mss: int
    hdr_len: int
    packets_out: int
    ca_state: int
    t_ns: int
    undone_gen: int = 0  # the hand-off (low 32 bits) whose restart Linux undid; 0: none

    @property
    def in_flight(self) -> bool:
        """Whether it has data outstanding (only such a socket has something to resend)."""
        return self.packets_out > 0 and self.snd_nxt != self.snd_una

    def restart_mtu(self) -> int:
        """The MTU to announce: the one its segments need now, less `MTU_STEP`."""
        return max(MIN_PMTU, self.mss + self.hdr_len + IPV4_HEADER - MTU_STEP)

    def as_record(self) -> dict[str, int | str]:
        return {"src": self.saddr, "sport": self.sport, "dst": self.daddr,
                "dport": self.dport, "seq": self.snd_una, "mss": self.mss,
                "mtu": self.restart_mtu()}


def decode_sock(key: bytes, value: bytes) -> SockState:
    """A ``ho_socks`` entry (raw key and value bytes) as a `SockState`."""
    saddr, daddr, sport, dport = KEY.unpack(key[:KEY.size])
    una, nxt, mss, hdr, pout, state, t_ns, undone, _pad = SOCK.unpack(value[:SOCK.size])
    return SockState(str(ipaddress.IPv4Address(saddr)), str(ipaddress.IPv4Address(daddr)),
                     int.from_bytes(sport, "big"), int.from_bytes(dport, "big"),
                     una, nxt, mss, hdr, pout, state, t_ns, undone)


def signal_value(gen: int, t_ns: int) -> bytes:
    """A ``ho_signal`` value: hand-off number gen at CLOCK_MONOTONIC t_ns."""
    return SIGNAL.pack(gen, t_ns)


def frag_needed(sock: SockState, src: str | None = None) -> bytes:
    """The ICMP (with its IPv4 header) that makes sock's kernel retransmit now.

    src: the ICMP's own source address (default: the socket's peer, as if the path
    toward it reported); the quoted packet is the socket's own (saddr -> daddr).
    """
    from scapy.layers.inet import ICMP, IP, TCP  # heavy: only where packets are built

    quoted = IP(src=sock.saddr, dst=sock.daddr, flags="DF", len=sock.mss + sock.hdr_len
                + IPV4_HEADER) / TCP(sport=sock.sport, dport=sock.dport, seq=sock.snd_una,
                                      flags="A")
    pkt = IP(src=src or sock.daddr, dst=sock.saddr) / ICMP(
        type=3, code=4, nexthopmtu=sock.restart_mtu()) / bytes(quoted)[:IPV4_HEADER + 8]
    return bytes(pkt)
