"""Classic pcap (libpcap's format): the file header and the record boundaries of a chunk.

Candidate records: every position whose timestamp's high 16 bits equal those of the
chunk's first record (see `analysis.pcap`).  Micro- and nanosecond files, either byte
order.
"""

from __future__ import annotations

import numpy as np

from analysis.pcap_records import (
    MAX_CAPLEN,
    Iface,
    ReaderState,
    Records,
    chain,
    empty_records,
    format_error,
    read_int,
    u32,
    u32_pair,
)

PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1": ("<", 1000), b"\xa1\xb2\xc3\xd4": (">", 1000),
               b"\x4d\x3c\xb2\xa1": ("<", 1), b"\xa1\xb2\x3c\x4d": (">", 1)}


class PcapWalker:
    """Record boundaries and headers of classic pcap."""

    first_record = 24

    def __init__(self, state: ReaderState, header: bytes):
        endian, ns = PCAP_MAGICS[header[:4]]
        state.endian, state.ns_per_frac = endian, ns
        snaplen = int.from_bytes(header[16:20], "little" if endian == "<" else "big")
        linktype = int.from_bytes(header[20:24], "little" if endian == "<" else "big") & 0xFFFF
        state.ifaces = [Iface(linktype, snaplen)]
        self.s = state

    def records(self, buf: np.ndarray, start: int, end: int, base: int) -> tuple[Records, int]:
        """Records wholly inside buf[start:end]; base: file offset of buf[0]."""
        s = self.s
        if end - start < 16:
            return empty_records(), start
        hi = read_int(buf, start, 4, s.endian) >> 16
        hoff = 2 if s.endian == "<" else 0
        region = buf[start + hoff: end - 16 + hoff + 2]
        parts = []
        dt = np.dtype(s.endian + "u2")
        for k in (0, 1):
            m = (len(region) - k) // 2
            if m > 0:
                v = region[k:k + 2 * m].view(dt)
                parts.append(np.flatnonzero(v == hi) * 2 + (start + k))
        cands = np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
        caplen = u32(buf, cands + 8, s.endian)
        plausible = caplen <= MAX_CAPLEN  # others go through step(), which checks
        cands, caplen = cands[plausible], caplen[plausible]
        nxt = cands + 16 + caplen

        def step(pos: int) -> int | None:
            if pos + 16 > end:
                return None
            cl = read_int(buf, pos + 8, 4, s.endian)
            if cl > MAX_CAPLEN:
                raise format_error(s, base + pos, f"record header claims {cl} captured bytes")
            if pos + 16 + cl > end:
                return None
            singles.append(pos)
            return pos + 16 + cl

        singles: list[int] = []
        runs, stop = chain(cands, nxt, start, end, step)
        recs = np.concatenate([*runs, np.array(singles, np.int64)])
        if singles:
            recs.sort()
        sec, frac = u32_pair(buf, recs, s.endian)
        cl, wl = u32_pair(buf, recs + 8, s.endian)
        if len(cl) and cl.max() > MAX_CAPLEN:
            bad = int(recs[np.argmax(cl > MAX_CAPLEN)])
            raise format_error(s, base + bad,
                               f"record header claims {int(cl.max())} captured bytes")
        ts = sec * 1_000_000_000 + frac * s.ns_per_frac
        return Records(recs + 16, cl, wl, ts, np.zeros(len(recs), np.uint16)), stop
