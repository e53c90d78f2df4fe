"""Scapy-crafted captures for the analysis tests (small, deterministic)."""

from __future__ import annotations

from pathlib import Path

from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import CookedLinux, Ether
from scapy.utils import PcapNgWriter, PcapWriter

T0 = 1_700_000_000.0
CLIENT, SERVER, CLIENT2 = "10.0.1.1", "10.0.0.2", "10.0.2.1"


def _eth() -> Ether:
    return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def _mptcp(payload: bytes) -> tuple:
    return (30, payload)


def dss(dsn: int | None = None, ssn: int = 0, dll: int = 0, data_ack: int | None = None) -> tuple:
    """An MPTCP DSS option with 8-octet data ACK and/or DSN mapping."""
    flags = 0
    body = b""
    if data_ack is not None:
        flags |= 0x03
        body += data_ack.to_bytes(8, "big")
    if dsn is not None:
        flags |= 0x0C
        body += dsn.to_bytes(8, "big") + ssn.to_bytes(4, "big") + dll.to_bytes(2, "big")
    return _mptcp(bytes([0x20, flags]) + body)


def mp_capable(sender_key: int | None = None, receiver_key: int | None = None,
               data_len: int | None = None) -> tuple:
    """MP_CAPABLE v1: SYN (no key), SYN/ACK (sender key), ACK (both keys, + data length)."""
    body = bytes([0x01, 0x81])
    if sender_key is not None:
        body += sender_key.to_bytes(8, "big")
    if receiver_key is not None:
        body += receiver_key.to_bytes(8, "big")
    if data_len is not None:
        body += data_len.to_bytes(2, "big")
    return _mptcp(body)


def mp_join_syn(token: int, nonce: int, addr_id: int = 1, backup: bool = False) -> tuple:
    """MP_JOIN on a SYN: token of the peer and our random number."""
    return _mptcp(bytes([0x10 | int(backup), addr_id]) + token.to_bytes(4, "big")
                  + nonce.to_bytes(4, "big"))


def mp_join_synack(hmac: int, nonce: int, addr_id: int = 0) -> tuple:
    """MP_JOIN on a SYN/ACK: truncated HMAC and random number."""
    return _mptcp(bytes([0x10, addr_id]) + hmac.to_bytes(8, "big") + nonce.to_bytes(4, "big"))


def mp_join_ack(hmac: bytes = bytes(20)) -> tuple:
    """MP_JOIN on the third ACK: the full HMAC."""
    return _mptcp(bytes([0x10, 0]) + hmac)


def seg(t: float, src: str, dst: str, sport: int, dport: int, seq: int, ack: int = 0,
        flags: str = "A", payload: int = 0, options: list | None = None, v6: bool = False,
        tsval: int | None = None) -> Ether:
    """One Ethernet/IP/TCP packet stamped at T0 + t."""
    opts = list(options or [])
    if tsval is not None:
        opts = [("NOP", None), ("NOP", None), ("Timestamp", (tsval, 0)), *opts]
    ip = IPv6(src=src, dst=dst) if v6 else IP(src=src, dst=dst)
    p = _eth() / ip / TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags=flags,
                          options=opts, window=1000) / (b"x" * payload)
    p.time = T0 + t
    return p


def udp(t: float, src: str, dst: str, sport: int, dport: int, payload: int) -> Ether:
    """One Ethernet/IPv4/UDP packet."""
    p = _eth() / IP(src=src, dst=dst) / UDP(sport=sport, dport=dport) / (b"u" * payload)
    p.time = T0 + t
    return p


def write(path: Path, packets: list, fmt: str = "pcap", snaplen: int = 128,
          cooked: bool = False) -> Path:
    """Write packets as pcap (truncated to snaplen) or pcapng; cooked: Linux SLL framing."""
    pkts = []
    for p in packets:
        if cooked:
            q = CookedLinux(pkttype=0, proto=0x0800 if IP in p else 0x86DD) / p.payload
            q.time = p.time
            p = q
        pkts.append(p)
    if fmt == "pcapng":
        with PcapNgWriter(str(path)) as w:
            for p in pkts:
                w.write(p)
    else:
        with PcapWriter(str(path), snaplen=snaplen, sync=False) as w:
            if pkts:
                w.write_header(pkts[0])
            for p in pkts:
                raw = bytes(p)
                w.write_packet(raw[:snaplen], sec=int(p.time), usec=round((p.time % 1) * 1e6),
                               caplen=min(len(raw), snaplen), wirelen=len(raw))
    return path


def handshake_and_data(n: int = 10, mss: int = 1000, order: list[int] | None = None,
                       t_step: float = 0.001, isn: int = 100, t0: float = 0.0) -> list:
    """A TCP connection: SYN, SYN/ACK, ACK, then n data segments in `order`, ACKs, FIN."""
    c, s = (CLIENT, 40000), (SERVER, 5201)
    pk = [seg(t0, c[0], s[0], c[1], s[1], isn, 0, "S",
              options=[("MSS", 1460), ("WScale", 7), ("SAckOK", b"")]),
          seg(t0 + 0.01, s[0], c[0], s[1], c[1], 500, isn + 1, "SA", options=[("MSS", 1460)]),
          seg(t0 + 0.02, c[0], s[0], c[1], s[1], isn + 1, 501, "A")]
    t = t0 + 0.03
    for k in order if order is not None else range(n):
        pk.append(seg(t, c[0], s[0], c[1], s[1], isn + 1 + k * mss, 501, "PA", payload=mss))
        t += t_step
    end = isn + 1 + n * mss
    pk.append(seg(t, s[0], c[0], s[1], c[1], 501, end, "A"))
    pk.append(seg(t + 0.001, c[0], s[0], c[1], s[1], end, 501, "FA"))
    pk.append(seg(t + 0.002, s[0], c[0], s[1], c[1], 501, end + 1, "FA"))
    pk.append(seg(t + 0.003, c[0], s[0], c[1], s[1], end + 1, 502, "A"))
    return pk




CLIENT_KEY, SERVER_KEY = 0x1111222233334444, 0x5555666677778888


def mptcp_connection(dsn_order: list[int] | None = None, n: int = 8, mss: int = 1000) -> list:
    """An MPTCP connection: initial subflow (CLIENT) + joined subflow (CLIENT2) to SERVER.

    Data segment k (DSN k*mss, relative) goes on subflow k % 2; dsn_order is the order in
    which they appear at the server.  Returns packets in capture order.
    """
    from analysis.flows import key_token

    token_s, idsn_c = key_token(SERVER_KEY)[0], key_token(CLIENT_KEY)[1]
    a, b, s = (CLIENT, 40000), (CLIENT2, 40001), (SERVER, 5201)
    pk = [seg(0.000, a[0], s[0], a[1], s[1], 1000, 0, "S", options=[mp_capable()]),
          seg(0.010, s[0], a[0], s[1], a[1], 7000, 1001, "SA",
              options=[mp_capable(SERVER_KEY)]),
          seg(0.020, a[0], s[0], a[1], s[1], 1001, 7001, "A",
              options=[mp_capable(CLIENT_KEY, SERVER_KEY)]),
          seg(0.030, b[0], s[0], b[1], s[1], 5000, 0, "S",
              options=[mp_join_syn(token_s, 99, addr_id=1)]),
          seg(0.040, s[0], b[0], s[1], b[1], 9000, 5001, "SA",
              options=[mp_join_synack(0x1234, 77)]),
          seg(0.050, b[0], s[0], b[1], s[1], 5001, 9001, "A", options=[mp_join_ack()])]
    sub_seq = {0: 1001, 1: 5001}
    segs = []
    for k in range(n):
        sf = k % 2
        src = a if sf == 0 else b
        segs.append((k, src, sub_seq[sf], sf))
        sub_seq[sf] += mss
    t = 0.06
    for k in dsn_order if dsn_order is not None else range(n):
        _, src, sseq, sf = segs[k]
        isn = 1000 if sf == 0 else 5000
        dsn = (idsn_c + 1 + k * mss) % 2**64
        pk.append(seg(t, src[0], s[0], src[1], s[1], sseq, 7001 if sf == 0 else 9001, "PA",
                      payload=mss, options=[dss(dsn=dsn, ssn=sseq - isn, dll=mss)]))
        t += 0.001
    return pk
