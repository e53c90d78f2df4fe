"""pcapng: the section and interface blocks, and the packet blocks of a chunk.

Candidate records: every aligned Enhanced Packet Block type (see `analysis.pcap`); any
other block (section and interface descriptions, simple and obsolete packet blocks) is
read one at a time.  Interfaces keep their own clocks (``if_tsresol`` down to 10^-19 or
2^-63 s, ``if_tsoffset`` within 2^61 ns); a packet block needs its Interface
Description Block first.
"""

from __future__ import annotations

import numpy as np

from analysis.pcap_records import (
    MAX_BLOCK_BYTES,
    MAX_CAPLEN,
    MAX_TS_NS,
    Iface,
    ReaderState,
    Records,
    chain,
    format_error,
    read_int,
    u32,
)

PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"
_EPB, _SPB, _PB, _IDB, _SHB = 6, 3, 2, 1, 0x0A0D0D0A
_MAX_DECIMAL_TSRES = 19        # if_tsresol 10^-19 s: a 64-bit counter of it spans 1.8 s


class PcapngWalker:
    """Block boundaries and packet blocks of pcapng."""

    first_record = 0

    def __init__(self, state: ReaderState, header: bytes):
        bom = header[8:12]
        if bom == b"\x4d\x3c\x2b\x1a":
            state.endian = "<"
        elif bom == b"\x1a\x2b\x3c\x4d":
            state.endian = ">"
        else:
            raise format_error(state, 8, "bad pcapng byte-order magic")
        self.s = state

    def records(self, buf: np.ndarray, start: int, end: int, base: int) -> tuple[Records, int]:
        """Packet records of the blocks wholly inside buf[start:end]; base: file offset."""
        s = self.s
        dt = np.dtype(s.endian + "u4")
        m = (end - start) // 4
        words = buf[start:start + 4 * m].view(dt)
        cands = np.flatnonzero(words[:-2] == _EPB).astype(np.int64) * 4 + start if m > 2 \
            else np.zeros(0, np.int64)
        blen = u32(buf, cands + 4, s.endian)
        plausible = (blen >= 32) & (blen % 4 == 0) & (blen <= MAX_BLOCK_BYTES)  # others: step()
        cands, blen = cands[plausible], blen[plausible]
        nxt = cands + blen
        singles: list[tuple[int, int, int, int, int]] = []
        epb_sections: list[tuple[int, int]] = [(start, s.section_base)]

        def step(pos: int) -> int | None:
            if pos + 12 > end:
                return None
            btype = read_int(buf, pos, 4, s.endian)
            bl = read_int(buf, pos + 4, 4, s.endian)
            if bl < 12 or bl % 4:
                raise format_error(s, base + pos, f"block length {bl} is not a multiple of 4 >= 12")
            if bl > MAX_BLOCK_BYTES:
                raise format_error(s, base + pos, f"block length {bl} exceeds the limit of "
                                   f"{MAX_BLOCK_BYTES} bytes")
            if pos + bl > end:
                return None
            if read_int(buf, pos + bl - 4, 4, s.endian) != bl:
                raise format_error(s, base + pos, "block trailer length differs from its header")
            self._block(buf, pos, btype, bl, base, singles, epb_sections)
            return pos + bl

        runs, stop = chain(cands, nxt, start, end, step)
        epb = np.sort(np.concatenate(runs)) if runs else np.zeros(0, np.int64)
        recs = self._epb(buf, epb, base, epb_sections)
        if singles:
            extra = np.array(singles, np.int64)
            recs = Records(*(np.concatenate([a, extra[:, k].astype(a.dtype)])
                             for k, a in enumerate((recs.data, recs.caplen, recs.wirelen,
                                                    recs.ts_ns, recs.iface))))
            order = np.argsort(recs.data, kind="stable")
            recs = Records(*(a[order] for a in (recs.data, recs.caplen, recs.wirelen,
                                                recs.ts_ns, recs.iface)))
        return recs, stop

    def _epb(self, buf: np.ndarray, pos: np.ndarray, base: int,
             sections: list[tuple[int, int]]) -> Records:
        s = self.s
        e = s.endian
        bl = u32(buf, pos + 4, e)
        trailer = u32(buf, pos + bl - 4, e)
        cl = u32(buf, pos + 20, e)
        bad = (trailer != bl) | (cl > bl - 32) | (bl < 32)
        if bad.any():
            raise format_error(s, base + int(pos[np.argmax(bad)]), "corrupt Enhanced Packet Block")
        starts = np.array([p for p, _ in sections], np.int64)
        sbase = np.array([b for _, b in sections], np.int64)
        iface = u32(buf, pos + 8, e) + sbase[np.searchsorted(starts, pos, "right") - 1]
        if len(iface) and iface.max() >= len(s.ifaces):
            k = int(np.argmax(iface >= len(s.ifaces)))
            raise format_error(s, base + int(pos[k]), "packet block names an undefined interface")
        units = (u32(buf, pos + 12, e).astype(np.uint64) << np.uint64(32)) \
            | u32(buf, pos + 16, e).astype(np.uint64)
        ts = np.zeros(len(pos), np.int64)
        for k in np.unique(iface):
            sel = iface == k
            ts[sel], ok = s.ifaces[int(k)].to_ns(units[sel])
            if not ok.all():
                bad_at = int(pos[np.flatnonzero(sel)[np.argmin(ok)]])
                raise format_error(s, base + bad_at, "packet timestamp beyond the year 2116")
        return Records(pos + 28, cl, u32(buf, pos + 24, e), ts, iface.astype(np.uint16))

    def _block(self, buf, pos, btype, bl, base, singles, sections) -> None:
        s = self.s
        e = s.endian
        if btype == _SHB:
            if bl < 28:
                raise format_error(s, base + pos,
                                   f"Section Header Block of {bl} bytes (at least 28)")
            bom = buf[pos + 8:pos + 12].tobytes()
            if bom != (b"\x4d\x3c\x2b\x1a" if e == "<" else b"\x1a\x2b\x3c\x4d"):
                raise format_error(s, base + pos,
                                   "pcapng sections of mixed byte order are not supported")
            s.section_base = len(s.ifaces)
            sections.append((pos, s.section_base))
        elif btype == _IDB:
            if bl < 20:
                raise format_error(s, base + pos, f"Interface Description Block of {bl} bytes "
                                   "(at least 20)")
            if len(s.ifaces) >= 65535:
                raise format_error(s, base + pos, "more than 65535 interfaces")
            s.ifaces.append(self._idb(buf, pos, bl, base))
        elif btype == _EPB:
            r = self._epb(buf, np.array([pos], np.int64), base, sections)
            singles.append((int(r.data[0]), int(r.caplen[0]), int(r.wirelen[0]),
                            int(r.ts_ns[0]), int(r.iface[0])))
        elif btype == _SPB:
            if len(s.ifaces) <= s.section_base:
                raise format_error(s, base + pos, "Simple Packet Block before any Interface "
                                   "Description Block")
            if bl < 16:
                raise format_error(s, base + pos,
                                   f"Simple Packet Block of {bl} bytes (at least 16)")
            wl = read_int(buf, pos + 8, 4, e)
            snap = s.ifaces[s.section_base].snaplen or MAX_CAPLEN
            singles.append((pos + 12, min(wl, bl - 16, snap), wl, 0, s.section_base))
        elif btype == _PB:
            k = s.section_base + read_int(buf, pos + 8, 2, e)
            if k >= len(s.ifaces):
                raise format_error(s, base + pos, "packet block names an undefined interface")
            cl = read_int(buf, pos + 20, 4, e)
            if bl < 32 or cl > bl - 32:
                raise format_error(s, base + pos, "corrupt Packet Block")
            units = (read_int(buf, pos + 12, 4, e) << 32) | read_int(buf, pos + 16, 4, e)
            ns, ok = s.ifaces[k].to_ns(np.array([units], np.uint64))
            if not ok[0]:
                raise format_error(s, base + pos, "packet timestamp beyond the year 2116")
            singles.append((pos + 28, cl, read_int(buf, pos + 24, 4, e), int(ns[0]), k))

    def _idb(self, buf: np.ndarray, pos: int, bl: int, base: int) -> Iface:
        s = self.s
        e = s.endian
        f = Iface(read_int(buf, pos + 8, 2, e), read_int(buf, pos + 12, 4, e), 1000, 1)
        o, oend = pos + 16, pos + bl - 4
        while o + 4 <= oend:
            code, ln = read_int(buf, o, 2, e), read_int(buf, o + 2, 2, e)
            if code == 0 or o + 4 + ln > oend:
                break
            if code == 9 and ln >= 1:  # if_tsresol
                r = int(buf[o + 4])
                if r & 0x80:
                    if (r & 0x7F) > 63:
                        raise format_error(s, base + o, f"if_tsresol 2^-{r & 0x7F} s is finer than "
                                           "2^-63 s")
                    f.ts_shift = r & 0x7F
                elif r > _MAX_DECIMAL_TSRES:
                    raise format_error(s, base + o, f"if_tsresol 10^-{r} s is finer than "
                                       f"10^-{_MAX_DECIMAL_TSRES} s")
                else:
                    f.ts_mul, f.ts_div = (10 ** (9 - r), 1) if r <= 9 else (1, 10 ** (r - 9))
            elif code == 14 and ln >= 8:  # if_tsoffset (seconds, signed)
                off = int.from_bytes(buf[o + 4:o + 12].tobytes(), "little" if e == "<" else "big",
                                     signed=True)
                if abs(off) > MAX_TS_NS // 2 // 1_000_000_000:
                    raise format_error(s, base + o, f"if_tsoffset of {off} s is out of range "
                                       "(at most 2^61 ns)")
                f.ts_offset_ns = off * 1_000_000_000
            o += 4 + (ln + 3) // 4 * 4
        return f
