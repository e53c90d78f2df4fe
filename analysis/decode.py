"""Vectorised protocol decoding: link layer -> IPv4/IPv6 -> TCP/UDP -> TCP options.

Every step works on whole arrays of packets at once (numpy gathers from the chunk's byte
buffer), never packet by packet.  Multi-byte fields come from one unaligned 8-byte load
(`Loader.le64`, two aligned 64-bit gathers and shifts), so a TCP header costs two loads.
Fields a packet does not carry (or that lie past its captured length) stay 0.
"""

from __future__ import annotations

import numpy as np

from analysis import table as T

# link types (https://www.tcpdump.org/linktypes.html)
LINK_NULL, LINK_ETHERNET, LINK_RAW, LINK_LOOP = 0, 1, 101, 108
LINK_SLL, LINK_SLL2, LINK_IPV4, LINK_IPV6 = 113, 276, 228, 229
SUPPORTED_LINKTYPES = {LINK_NULL: "BSD loopback", LINK_ETHERNET: "Ethernet", 12: "raw IP",
                       14: "raw IP", LINK_RAW: "raw IP", LINK_LOOP: "OpenBSD loopback",
                       LINK_SLL: "Linux cooked (SLL)", LINK_SLL2: "Linux cooked v2 (SLL2)",
                       LINK_IPV4: "raw IPv4", LINK_IPV6: "raw IPv6"}

ETH_IPV4, ETH_IPV6, ETH_VLAN, ETH_QINQ = 0x0800, 0x86DD, 0x8100, 0x88A8
_U64 = np.uint64
_IPV6_EXT = (0, 43, 60, 51, 44)  # hop-by-hop, routing, destination options, AH, fragment


class Loader:
    """Unaligned big-endian reads from a byte buffer at arrays of positions.

    buf: uint8 array whose length is a multiple of 8 and that has at least 16 bytes of
    padding past the last byte any position may point at.
    """

    def __init__(self, buf: np.ndarray):
        self.u8 = buf
        self.q = buf[:len(buf) // 8 * 8].view("<u8")
        # No overlapping byte-strided uint64 view (one gather for 8 bytes): the analysis
        # of a fat-tree capture crashed with a segmentation fault in the software-
        # emulated VM with it (2026-11-25), and the two aligned gathers below are safe.
        self.w: np.ndarray | None = None

    def b(self, p: np.ndarray) -> np.ndarray:
        """One byte at each position (uint8)."""
        return np.take(self.u8, p)

    def le64(self, p: np.ndarray) -> np.ndarray:
        """Eight bytes at each position as a little-endian uint64."""
        if self.w is not None:
            return self.w[p]
        q = p >> 3
        sh = ((p & 7) << 3).astype(_U64)
        lo = np.take(self.q, q) >> sh
        hi = (np.take(self.q, q + 1) << _U64(1)) << (_U64(63) - sh)
        return lo | hi

    def be64(self, p: np.ndarray) -> np.ndarray:
        """Eight bytes at each position as a big-endian uint64."""
        return self.le64(p).byteswap()

    def be32(self, p: np.ndarray) -> np.ndarray:
        """Four bytes at each position as a big-endian uint32."""
        return (self.be64(p) >> _U64(32)).astype(np.uint32)

    def be16(self, p: np.ndarray) -> np.ndarray:
        """Two bytes at each position as a big-endian uint16."""
        hi = np.take(self.u8, p).astype(np.uint16) << np.uint16(8)
        return hi | np.take(self.u8, p + 1)


def _link(ld: Loader, start: np.ndarray, linktype: np.ndarray | int) -> tuple[np.ndarray, ...]:
    """Network-layer offset and ethertype per packet (ethertype 0: not IP)."""
    n = len(start)
    l3 = start.copy()
    et = np.zeros(n, np.uint16)
    kinds = np.unique(linktype) if isinstance(linktype, np.ndarray) else [linktype]
    for lt in kinds:
        sel = slice(None) if not isinstance(linktype, np.ndarray) else np.flatnonzero(
            linktype == lt)
        s = start[sel]
        if lt == LINK_ETHERNET:
            e = ld.be16(s + 12)
            off = s + 14
            for _ in range(2):  # 802.1Q / 802.1ad tags
                tagged = (e == ETH_VLAN) | (e == ETH_QINQ)
                if not tagged.any():
                    break
                e = np.where(tagged, ld.be16(off + 2), e)
                off = off + np.where(tagged, 4, 0)
            et[sel], l3[sel] = e, off
        elif lt == LINK_SLL:
            et[sel], l3[sel] = ld.be16(s + 14), s + 16
        elif lt == LINK_SLL2:
            et[sel], l3[sel] = ld.be16(s), s + 20
        elif lt in (LINK_RAW, 12, 14, LINK_IPV4, LINK_IPV6, LINK_NULL, LINK_LOOP):
            off = s + 4 if lt in (LINK_NULL, LINK_LOOP) else s
            ver = ld.b(off) >> 4
            et[sel] = np.where(ver == 4, ETH_IPV4, np.where(ver == 6, ETH_IPV6, 0))
            l3[sel] = off
    return l3, et


def decode(buf: np.ndarray, start: np.ndarray, caplen: np.ndarray,
           linktype: np.ndarray | int) -> tuple[dict[str, np.ndarray], dict, dict]:
    """Decode packets whose data lie in buf.

    buf: padded byte buffer (see `Loader`); start: data offset of each packet in buf (int64);
    caplen: captured bytes of each packet; linktype: one link type or one per packet.
    Returns (columns without ts_ns/iface/caplen/wirelen and with raw addresses in
    ``src_key``/``dst_key``, side tables with chunk-relative ``pkt``, address keys).
    """
    ld = Loader(buf)
    n = len(start)
    cols = T.empty_columns(tuple(c for c in T.PACKET_COLUMNS
                                 if c.name not in ("ts_ns", "iface", "caplen", "wirelen")), n)
    end = start + caplen
    l3, et = _link(ld, start, linktype)

    l4 = np.zeros(n, np.int64)
    l4len = np.zeros(n, np.int64)
    valid_l4 = np.zeros(n, bool)
    keys: dict[str, np.ndarray] = {}

    i4 = np.flatnonzero((et == ETH_IPV4) & (l3 + 20 <= end))
    if len(i4):
        p = l3[i4]
        w0 = ld.be64(p)
        ver = (w0 >> _U64(60)).astype(np.uint8)
        ok = ver == 4
        i4, p, w0 = i4[ok], p[ok], w0[ok]
        ihl = ((w0 >> _U64(56)) & _U64(0xF)).astype(np.int64) * 4
        tot = ((w0 >> _U64(32)) & _U64(0xFFFF)).astype(np.int64)
        frag = (w0 & _U64(0x1FFF)).astype(np.int64)
        w1 = ld.be64(p + 8)
        cols["ip_ver"][i4] = 4
        cols["proto"][i4] = ((w1 >> _U64(48)) & _U64(0xFF)).astype(np.uint8)
        keys["src4"] = (w1 & _U64(0xFFFFFFFF)).astype(np.uint32)
        keys["dst4"] = ld.be32(p + 16)
        keys["i4"] = i4
        l4[i4] = p + ihl
        l4len[i4] = tot - ihl
        valid_l4[i4] = (frag == 0) & (ihl >= 20)

    i6 = np.flatnonzero((et == ETH_IPV6) & (l3 + 40 <= end))
    if len(i6):
        p = l3[i6]
        w0 = ld.be64(p)
        ok = (w0 >> _U64(60)) == 6
        i6, p, w0 = i6[ok], p[ok], w0[ok]
        plen = ((w0 >> _U64(16)) & _U64(0xFFFF)).astype(np.int64)
        nh = ((w0 >> _U64(8)) & _U64(0xFF)).astype(np.uint8)
        keys["src6"] = np.stack([ld.le64(p + 8), ld.le64(p + 16)], axis=1)
        keys["dst6"] = np.stack([ld.le64(p + 24), ld.le64(p + 32)], axis=1)
        keys["i6"] = i6
        q = p + 40
        good = np.ones(len(i6), bool)
        end6 = end[i6]
        for _ in range(4):  # a bounded walk: chains of more headers are left undecoded
            ext = np.isin(nh, _IPV6_EXT) & good
            cut = ext & (q + 8 > end6)  # the header lies past the captured bytes
            if cut.any():
                good[cut] = False
                ext &= ~cut
            if not ext.any():
                break
            e = np.flatnonzero(ext)
            hdr = q[e]
            nxt = ld.b(hdr)
            hlen = ld.b(hdr + 1).astype(np.int64)
            size = np.where(nh[e] == 51, (hlen + 2) * 4, np.where(nh[e] == 44, 8, (hlen + 1) * 8))
            isfrag = nh[e] == 44
            if isfrag.any():  # non-first fragments carry no transport header
                fo = ld.be16(hdr + 2) >> np.uint16(3)
                good[e[isfrag & (fo != 0)]] = False
            nh[e] = nxt
            q[e] = hdr + size
        cols["ip_ver"][i6] = 6
        cols["proto"][i6] = nh
        l4[i6] = q
        l4len[i6] = plen - (q - (p + 40))
        valid_l4[i6] = good

    proto = cols["proto"]
    it = np.flatnonzero(valid_l4 & (proto == 6) & (l4 + 20 <= end))
    if len(it):
        p = l4[it]
        w0 = ld.be64(p)
        w1 = ld.be64(p + 8)
        cols["sport"][it] = (w0 >> _U64(48)).astype(np.uint16)
        cols["dport"][it] = (w0 >> _U64(32)).astype(np.uint16)
        cols["seq"][it] = w0.astype(np.uint32)
        cols["ack"][it] = (w1 >> _U64(32)).astype(np.uint32)
        doff = ((w1 >> _U64(28)) & _U64(0xF)).astype(np.int64) * 4
        cols["tcp_flags"][it] = (w1 >> _U64(16)).astype(np.uint8)
        cols["win"][it] = w1.astype(np.uint16)
        cols["payload"][it] = np.clip(l4len[it] - doff, 0, None)
        side = _tcp_options(ld, cols, it, p + 20, np.minimum(p + doff, end[it]))
    else:
        side = {}
    iu = np.flatnonzero(valid_l4 & (proto == 17) & (l4 + 8 <= end))
    if len(iu):
        w0 = ld.be64(l4[iu])
        cols["sport"][iu] = (w0 >> _U64(48)).astype(np.uint16)
        cols["dport"][iu] = (w0 >> _U64(32)).astype(np.uint16)
        cols["payload"][iu] = np.clip(l4len[iu] - 8, 0, None)
    return cols, side, keys


def _tcp_options(ld: Loader, cols: dict[str, np.ndarray], rows: np.ndarray, cur: np.ndarray,
                 oend: np.ndarray) -> dict[str, dict[str, np.ndarray]]:
    """Walk the TCP options of the packets `rows` (cursor `cur` up to `oend`) in lock-step."""
    side: dict[str, list[dict[str, np.ndarray]]] = {k: [] for k in T.SIDE_COLUMNS}
    act = cur < oend
    rows, cur, oend = rows[act], cur[act], oend[act]
    opts = cols["opts"]
    # fast path: most stacks start with NOP NOP TS (RFC 7323 appendix A layout)
    if len(rows):
        w = ld.be64(cur)
        ts = np.flatnonzero(((w >> _U64(32)) == _U64(0x0101080A)) & (cur + 12 <= oend))
        if len(ts):
            r = rows[ts]
            cols["tsval"][r] = w[ts].astype(np.uint32)
            cols["tsecr"][r] = ld.be32(cur[ts] + 8)
            opts[r] |= T.OPT_TS
            cur[ts] += 12
            keep = cur < oend
            if not keep.all():
                rows, cur, oend = rows[keep], cur[keep], oend[keep]
    for _ in range(40):  # each step advances at least one byte of at most 40
        if not len(rows):
            break
        w = ld.be64(cur)
        kind = (w >> _U64(56)).astype(np.uint8)
        olen = ((w >> _U64(48)) & _U64(0xFF)).astype(np.int64)
        nop = kind == 1
        step = np.where(nop, np.where(olen == 1, 2, 1), olen)  # NOP NOP in one step
        bad = ~nop & ((kind == 0) | (olen < 2) | (cur + olen > oend))
        use = ~nop & ~bad
        present = np.bincount(kind[use], minlength=256)
        for k, handler in _OPTION_HANDLERS.items():
            if present[k]:
                sel = np.flatnonzero(use & (kind == k))
                handler(ld, cols, side, rows[sel], cur[sel], olen[sel], w[sel])
                opts[rows[sel]] |= _OPTION_BITS.get(k, 0)
        cur = cur + step
        keep = ~bad & (cur < oend)
        if not keep.all():
            rows, cur, oend = rows[keep], cur[keep], oend[keep]
    out = {}
    for name, parts in side.items():
        if parts:
            out[name] = {c.name: np.concatenate([p[c.name] for p in parts]).astype(c.dtype)
                         for c in T.SIDE_COLUMNS[name]}
    if "syn" in out:
        out["syn"] = _merge_syn(out["syn"])
    return out


def _merge_syn(t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One row per packet from the rows the MSS / window-scale / SACK-permitted options made."""
    pkt, inv = np.unique(t["pkt"], return_inverse=True)
    mss = np.zeros(len(pkt), np.uint16)
    ws = np.full(len(pkt), -1, np.int8)
    sp = np.zeros(len(pkt), bool)
    np.maximum.at(mss, inv, t["mss"])
    np.maximum.at(ws, inv, t["wscale"])
    np.logical_or.at(sp, inv, t["sack_perm"])
    return {"pkt": pkt, "mss": mss, "wscale": ws, "sack_perm": sp}


def _opt_mss(ld, cols, side, rows, cur, olen, w) -> None:
    mss = ((w >> _U64(32)) & _U64(0xFFFF)).astype(np.uint16)
    side["syn"].append({"pkt": rows, "mss": mss, "wscale": np.full(len(rows), -1, np.int8),
                        "sack_perm": np.zeros(len(rows), bool)})


def _opt_wscale(ld, cols, side, rows, cur, olen, w) -> None:
    ws = ((w >> _U64(40)) & _U64(0xFF)).astype(np.int8)
    side["syn"].append({"pkt": rows, "mss": np.zeros(len(rows), np.uint16), "wscale": ws,
                        "sack_perm": np.zeros(len(rows), bool)})


def _opt_sack_perm(ld, cols, side, rows, cur, olen, w) -> None:
    side["syn"].append({"pkt": rows, "mss": np.zeros(len(rows), np.uint16),
                        "wscale": np.full(len(rows), -1, np.int8),
                        "sack_perm": np.ones(len(rows), bool)})


def _opt_sack(ld, cols, side, rows, cur, olen, w) -> None:
    nblk = np.clip((olen - 2) // 8, 0, 4)
    cols["sack_n"][rows] = nblk
    for k in range(4):
        s = np.flatnonzero(nblk > k)
        if not len(s):
            break
        v = ld.be64(cur[s] + 2 + 8 * k)
        side["sack"].append({"pkt": rows[s], "left": (v >> _U64(32)).astype(np.uint32),
                             "right": v.astype(np.uint32)})


def _opt_ts(ld, cols, side, rows, cur, olen, w) -> None:
    ok = olen >= 10
    rows, cur, w = rows[ok], cur[ok], w[ok]
    cols["tsval"][rows] = (w >> _U64(16)).astype(np.uint32)
    cols["tsecr"][rows] = ld.be32(cur + 6)


def _opt_mptcp(ld, cols, side, rows, cur, olen, w) -> None:
    sub = ((w >> _U64(44)) & _U64(0xF)).astype(np.int64)
    cols["mp_subtypes"][rows] |= (np.uint16(1) << sub.astype(np.uint16))
    d = np.flatnonzero(sub == T.MP_DSS)
    if len(d):
        r, c = rows[d], cur[d]
        flags = ((w[d] >> _U64(32)) & _U64(0xFF)).astype(np.uint8)
        cols["dss_flags"][r] = flags
        p = c + 4
        has_a = (flags & T.DSS_A) != 0
        a8 = (flags & T.DSS_a) != 0
        if has_a.any():
            v = ld.be64(p[has_a])
            cols["data_ack"][r[has_a]] = np.where(a8[has_a], v, v >> _U64(32))
        p = p + np.where(has_a, np.where(a8, 8, 4), 0)
        has_m = ((flags & T.DSS_M) != 0) & (p + 6 <= c + olen[d])
        if has_m.any():
            m8 = (flags[has_m] & T.DSS_m) != 0
            pm = p[has_m]
            v = ld.be64(pm)
            cols["dsn"][r[has_m]] = np.where(m8, v, v >> _U64(32))
            pm = pm + np.where(m8, 8, 4)
            v2 = ld.be64(pm)
            cols["ssn"][r[has_m]] = (v2 >> _U64(32)).astype(np.uint32)
            cols["dll"][r[has_m]] = ((v2 >> _U64(16)) & _U64(0xFFFF)).astype(np.uint16)
    m = np.flatnonzero(sub == T.MP_CAPABLE)
    if len(m):
        r, c, ln = rows[m], cur[m], olen[m]
        skey = np.where(ln >= 12, ld.be64(c + 4), _U64(0))
        rkey = np.where(ln >= 20, ld.be64(c + 12), _U64(0))
        dlen = np.where(ln >= 22, ld.be16(c + 20), 0)
        side["mp_capable"].append({"pkt": r, "version": ((w[m] >> _U64(40)) & _U64(0xF)),
                                   "flags": (w[m] >> _U64(32)) & _U64(0xFF),
                                   "sender_key": skey, "receiver_key": rkey, "data_len": dlen})
    j = np.flatnonzero(sub == T.MP_JOIN)
    if len(j):
        r, c, ln = rows[j], cur[j], olen[j]
        is_syn = ln == 12
        is_synack = ln == 16
        side["mp_join"].append({
            "pkt": r, "backup": ((w[j] >> _U64(40)) & _U64(1)).astype(bool),
            "addr_id": (w[j] >> _U64(32)) & _U64(0xFF),
            "token": np.where(is_syn, ld.be32(c + 4), 0),
            "nonce": np.where(is_syn, ld.be32(c + 8), np.where(is_synack, ld.be32(c + 12), 0))})


_OPTION_HANDLERS = {2: _opt_mss, 3: _opt_wscale, 4: _opt_sack_perm, 5: _opt_sack, 8: _opt_ts,
                    30: _opt_mptcp}
_OPTION_BITS = {2: T.OPT_MSS, 3: T.OPT_WSCALE, 4: T.OPT_SACK_PERM, 5: T.OPT_SACK, 8: T.OPT_TS,
                30: T.OPT_MPTCP}
