"""Fast capture reader: classic pcap and pcapng into a columnar `PacketTable`.

The file is read in chunks into one reusable numpy buffer, so memory does not grow with the
file, only with the decoded table (about 80 bytes per packet).  Finding record boundaries is
the only sequential part of reading a capture; it is done without a per-packet Python loop:

1. *candidates*: every position whose bytes could start a record (classic pcap: the high
   16 bits of the timestamp seconds equal those of the chunk's first record; pcapng: an
   aligned block type 6, an Enhanced Packet Block), found with one vectorised scan;
2. *chaining*: each candidate's successor is ``position + header + length``; wherever the
   successor is the next candidate the chain is followed in bulk, and only at a break
   (a false candidate, an odd block, a timestamp that crossed a 2^16 s boundary) does a
   Python step read one header.  The result is exact whatever the candidates are; the
   candidates only decide how fast it is.

Decoding then runs on whole arrays (`analysis.decode`).  Errors: `CaptureFormatError`
naming the file and byte offset of the first bad or truncated record.

Limits (a capture from someone else is untrusted input; every violation is a
`CaptureFormatError`, never another exception): a classic record holds at most
`MAX_CAPLEN` bytes, a pcapng block at most `MAX_BLOCK_BYTES`, so the read buffer never
grows beyond twice that; timestamps lie within +-`MAX_TS_NS` of 1970 (``if_tsresol`` down
to 10^-19 or 2^-63 s, ``if_tsoffset`` within 2^61 ns); packet blocks need their Interface
Description Block first; IPv6 extension headers are followed at most four deep and never
past the captured bytes.
"""

from __future__ import annotations

import ipaddress
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np
import pandas as pd

from analysis import decode as D
from analysis import table as T
from testbed.core.errors import CaptureFormatError

DEFAULT_CHUNK_BYTES = 1 << 20  # keeps a chunk and its gathers in the CPU caches
MAX_CAPLEN = 262144            # libpcap's largest snapshot length
MAX_BLOCK_BYTES = 16 << 20     # largest pcapng block accepted (Wireshark: 16 MiB)
MAX_TS_NS = 1 << 62            # |timestamp| limit: about 146 years from 1970 (year 2116)
_MAX_DECIMAL_TSRES = 19        # if_tsresol 10^-19 s: a 64-bit counter of it spans 1.8 s
_PAD = 64
_PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1": ("<", 1000), b"\xa1\xb2\xc3\xd4": (">", 1000),
                b"\x4d\x3c\xb2\xa1": ("<", 1), b"\xa1\xb2\x3c\x4d": (">", 1)}
_PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"
_EPB, _SPB, _PB, _IDB, _SHB = 6, 3, 2, 1, 0x0A0D0D0A
_REMEDY = "the capture is truncated or corrupt; re-run the capture (stop tcpdump cleanly)"


@dataclass
class Records:
    """Packet records found in one chunk buffer (all arrays in record order)."""

    data: np.ndarray      # offset of the packet bytes in the buffer
    caplen: np.ndarray
    wirelen: np.ndarray
    ts_ns: np.ndarray
    iface: np.ndarray


@dataclass
class _Iface:
    linktype: int
    snaplen: int
    ts_mul: int = 1000     # ns per timestamp unit (when >= 1)
    ts_div: int = 1        # units per ns (when the resolution is finer than 1 ns)
    ts_offset_ns: int = 0
    ts_shift: int = -1     # binary resolution 2^-shift s (-1: decimal, ts_mul / ts_div)

    def to_ns(self, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ns since the epoch as int64, ok mask) of raw 64-bit timestamps (uint64 array).

        ok is False where the time lies beyond +-MAX_TS_NS; such entries hold 0.
        """
        u = units.astype(np.uint64)
        if self.ts_shift >= 0:
            k = self.ts_shift
            whole = u >> np.uint64(k)
            frac = u & np.uint64((1 << k) - 1)
            if k > 30:  # keep 30 bits of the fraction: exact to well below 1 ns
                frac, k = frac >> np.uint64(k - 30), 30
            ok = whole <= np.uint64(MAX_TS_NS // 1_000_000_000)
            sub = (frac * np.uint64(1_000_000_000)) >> np.uint64(k)
            ns = np.where(ok, whole, 0).astype(np.int64) * 1_000_000_000 + sub.astype(np.int64)
        elif self.ts_div == 1:
            ok = u <= np.uint64(MAX_TS_NS // self.ts_mul)
            ns = np.where(ok, u, 0).astype(np.int64) * self.ts_mul
        else:
            ns = (u // np.uint64(self.ts_div)).astype(np.int64)  # < 2^64 / 10 < MAX_TS_NS
            ok = np.ones(len(u), bool)
        return np.where(ok, ns + self.ts_offset_ns, 0), ok


@dataclass
class _State:
    """What a walker knows about the file so far."""

    path: str
    endian: str = "<"
    ns_per_frac: int = 1000
    ifaces: list[_Iface] = field(default_factory=list)
    section_base: int = 0   # index in ifaces of the current pcapng section's interface 0


def _err(state: _State, offset: int, what: str) -> CaptureFormatError:
    return CaptureFormatError(f"{state.path}: {what} at byte offset {offset}; {_REMEDY}")


def _u32(buf: np.ndarray, pos: np.ndarray, endian: str) -> np.ndarray:
    v = D.Loader(buf).le64(pos)
    if endian == ">":
        return (v.byteswap() >> np.uint64(32)).astype(np.int64)
    return (v & np.uint64(0xFFFFFFFF)).astype(np.int64)


def _u32_pair(buf: np.ndarray, pos: np.ndarray, endian: str) -> tuple[np.ndarray, np.ndarray]:
    """The two consecutive 32-bit words at each position, from one 8-byte load."""
    v = D.Loader(buf).le64(pos)
    if endian == ">":
        v = v.byteswap()
        return (v >> np.uint64(32)).astype(np.int64), (v & np.uint64(0xFFFFFFFF)).astype(np.int64)
    return (v & np.uint64(0xFFFFFFFF)).astype(np.int64), (v >> np.uint64(32)).astype(np.int64)


def _int(buf: np.ndarray, pos: int, size: int, endian: str) -> int:
    return int.from_bytes(buf[pos:pos + size].tobytes(), "little" if endian == "<" else "big")


def _chain(cands: np.ndarray, nxt: np.ndarray, pos: int, end: int, step) -> tuple[list, int]:
    """Follow records from pos; bulk runs through candidates, `step` elsewhere.

    cands: sorted candidate positions; nxt: each candidate's successor; step(pos) -> next
    position or None when the record at pos is incomplete.  Returns (list of position
    arrays of the records visited in bulk, position of the first incomplete record).
    """
    runs = []
    breaks = np.flatnonzero(nxt[:-1] != cands[1:])
    nc = len(cands)
    while pos < end:
        i = int(np.searchsorted(cands, pos))
        if i < nc and cands[i] == pos:
            b = int(np.searchsorted(breaks, i))
            j = int(breaks[b]) if b < len(breaks) else nc - 1
            if nxt[j] > end:  # the last record of the run is incomplete
                if j == i:
                    return runs, pos
                runs.append(cands[i:j])
                return runs, int(cands[j])
            runs.append(cands[i:j + 1])
            pos = int(nxt[j])
        else:
            nxt_pos = step(pos)
            if nxt_pos is None:
                return runs, pos
            pos = nxt_pos
    return runs, pos


class _PcapWalker:
    """Record boundaries and headers of classic pcap."""

    first_record = 24

    def __init__(self, state: _State, header: bytes):
        endian, ns = _PCAP_MAGICS[header[:4]]
        state.endian, state.ns_per_frac = endian, ns
        snaplen = int.from_bytes(header[16:20], "little" if endian == "<" else "big")
        linktype = int.from_bytes(header[20:24], "little" if endian == "<" else "big") & 0xFFFF
        state.ifaces = [_Iface(linktype, snaplen)]
        self.s = state

    def records(self, buf: np.ndarray, start: int, end: int, base: int) -> tuple[Records, int]:
        """Records wholly inside buf[start:end]; base: file offset of buf[0]."""
        s = self.s
        if end - start < 16:
            return _empty_records(), start
        hi = _int(buf, start, 4, s.endian) >> 16
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
        caplen = _u32(buf, cands + 8, s.endian)
        plausible = caplen <= MAX_CAPLEN  # others go through step(), which checks
        cands, caplen = cands[plausible], caplen[plausible]
        nxt = cands + 16 + caplen

        def step(pos: int) -> int | None:
            if pos + 16 > end:
                return None
            cl = _int(buf, pos + 8, 4, s.endian)
            if cl > MAX_CAPLEN:
                raise _err(s, base + pos, f"record header claims {cl} captured bytes")
            if pos + 16 + cl > end:
                return None
            singles.append(pos)
            return pos + 16 + cl

        singles: list[int] = []
        runs, stop = _chain(cands, nxt, start, end, step)
        recs = np.concatenate([*runs, np.array(singles, np.int64)])
        if singles:
            recs.sort()
        sec, frac = _u32_pair(buf, recs, s.endian)
        cl, wl = _u32_pair(buf, recs + 8, s.endian)
        if len(cl) and cl.max() > MAX_CAPLEN:
            bad = int(recs[np.argmax(cl > MAX_CAPLEN)])
            raise _err(s, base + bad, f"record header claims {int(cl.max())} captured bytes")
        ts = sec * 1_000_000_000 + frac * s.ns_per_frac
        return Records(recs + 16, cl, wl, ts, np.zeros(len(recs), np.uint16)), stop


class _PcapngWalker:
    """Block boundaries and packet blocks of pcapng."""

    first_record = 0

    def __init__(self, state: _State, header: bytes):
        bom = header[8:12]
        if bom == b"\x4d\x3c\x2b\x1a":
            state.endian = "<"
        elif bom == b"\x1a\x2b\x3c\x4d":
            state.endian = ">"
        else:
            raise _err(state, 8, "bad pcapng byte-order magic")
        self.s = state

    def records(self, buf: np.ndarray, start: int, end: int, base: int) -> tuple[Records, int]:
        """Packet records of the blocks wholly inside buf[start:end]; base: file offset."""
        s = self.s
        dt = np.dtype(s.endian + "u4")
        m = (end - start) // 4
        words = buf[start:start + 4 * m].view(dt)
        cands = np.flatnonzero(words[:-2] == _EPB).astype(np.int64) * 4 + start if m > 2 \
            else np.zeros(0, np.int64)
        blen = _u32(buf, cands + 4, s.endian)
        plausible = (blen >= 32) & (blen % 4 == 0) & (blen <= MAX_BLOCK_BYTES)  # others: step()
        cands, blen = cands[plausible], blen[plausible]
        nxt = cands + blen
        singles: list[tuple[int, int, int, int, int]] = []
        epb_sections: list[tuple[int, int]] = [(start, s.section_base)]

        def step(pos: int) -> int | None:
            if pos + 12 > end:
                return None
            btype = _int(buf, pos, 4, s.endian)
            bl = _int(buf, pos + 4, 4, s.endian)
            if bl < 12 or bl % 4:
                raise _err(s, base + pos, f"block length {bl} is not a multiple of 4 >= 12")
            if bl > MAX_BLOCK_BYTES:
                raise _err(s, base + pos, f"block length {bl} exceeds the limit of "
                           f"{MAX_BLOCK_BYTES} bytes")
            if pos + bl > end:
                return None
            if _int(buf, pos + bl - 4, 4, s.endian) != bl:
                raise _err(s, base + pos, "block trailer length differs from its header")
            self._block(buf, pos, btype, bl, base, singles, epb_sections)
            return pos + bl

        runs, stop = _chain(cands, nxt, start, end, step)
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
        bl = _u32(buf, pos + 4, e)
        trailer = _u32(buf, pos + bl - 4, e)
        cl = _u32(buf, pos + 20, e)
        bad = (trailer != bl) | (cl > bl - 32) | (bl < 32)
        if bad.any():
            raise _err(s, base + int(pos[np.argmax(bad)]), "corrupt Enhanced Packet Block")
        starts = np.array([p for p, _ in sections], np.int64)
        sbase = np.array([b for _, b in sections], np.int64)
        iface = _u32(buf, pos + 8, e) + sbase[np.searchsorted(starts, pos, "right") - 1]
        if len(iface) and iface.max() >= len(s.ifaces):
            k = int(np.argmax(iface >= len(s.ifaces)))
            raise _err(s, base + int(pos[k]), "packet block names an undefined interface")
        units = (_u32(buf, pos + 12, e).astype(np.uint64) << np.uint64(32)) \
            | _u32(buf, pos + 16, e).astype(np.uint64)
        ts = np.zeros(len(pos), np.int64)
        for k in np.unique(iface):
            sel = iface == k
            ts[sel], ok = s.ifaces[int(k)].to_ns(units[sel])
            if not ok.all():
                bad_at = int(pos[np.flatnonzero(sel)[np.argmin(ok)]])
                raise _err(s, base + bad_at, "packet timestamp beyond the year 2116")
        return Records(pos + 28, cl, _u32(buf, pos + 24, e), ts, iface.astype(np.uint16))

    def _block(self, buf, pos, btype, bl, base, singles, sections) -> None:
        s = self.s
        e = s.endian
        if btype == _SHB:
            if bl < 28:
                raise _err(s, base + pos, f"Section Header Block of {bl} bytes (at least 28)")
            bom = buf[pos + 8:pos + 12].tobytes()
            if bom != (b"\x4d\x3c\x2b\x1a" if e == "<" else b"\x1a\x2b\x3c\x4d"):
                raise _err(s, base + pos, "pcapng sections of mixed byte order are not supported")
            s.section_base = len(s.ifaces)
            sections.append((pos, s.section_base))
        elif btype == _IDB:
            if bl < 20:
                raise _err(s, base + pos, f"Interface Description Block of {bl} bytes "
                           "(at least 20)")
            if len(s.ifaces) >= 65535:
                raise _err(s, base + pos, "more than 65535 interfaces")
            s.ifaces.append(self._idb(buf, pos, bl, base))
        elif btype == _EPB:
            r = self._epb(buf, np.array([pos], np.int64), base, sections)
            singles.append((int(r.data[0]), int(r.caplen[0]), int(r.wirelen[0]),
                            int(r.ts_ns[0]), int(r.iface[0])))
        elif btype == _SPB:
            if len(s.ifaces) <= s.section_base:
                raise _err(s, base + pos, "Simple Packet Block before any Interface "
                           "Description Block")
            if bl < 16:
                raise _err(s, base + pos, f"Simple Packet Block of {bl} bytes (at least 16)")
            wl = _int(buf, pos + 8, 4, e)
            snap = s.ifaces[s.section_base].snaplen or MAX_CAPLEN
            singles.append((pos + 12, min(wl, bl - 16, snap), wl, 0, s.section_base))
        elif btype == _PB:
            k = s.section_base + _int(buf, pos + 8, 2, e)
            if k >= len(s.ifaces):
                raise _err(s, base + pos, "packet block names an undefined interface")
            cl = _int(buf, pos + 20, 4, e)
            if bl < 32 or cl > bl - 32:
                raise _err(s, base + pos, "corrupt Packet Block")
            units = (_int(buf, pos + 12, 4, e) << 32) | _int(buf, pos + 16, 4, e)
            ns, ok = s.ifaces[k].to_ns(np.array([units], np.uint64))
            if not ok[0]:
                raise _err(s, base + pos, "packet timestamp beyond the year 2116")
            singles.append((pos + 28, cl, _int(buf, pos + 24, 4, e), int(ns[0]), k))

    def _idb(self, buf: np.ndarray, pos: int, bl: int, base: int) -> _Iface:
        s = self.s
        e = s.endian
        f = _Iface(_int(buf, pos + 8, 2, e), _int(buf, pos + 12, 4, e), 1000, 1)
        o, oend = pos + 16, pos + bl - 4
        while o + 4 <= oend:
            code, ln = _int(buf, o, 2, e), _int(buf, o + 2, 2, e)
            if code == 0 or o + 4 + ln > oend:
                break
            if code == 9 and ln >= 1:  # if_tsresol
                r = int(buf[o + 4])
                if r & 0x80:
                    if (r & 0x7F) > 63:
                        raise _err(s, base + o, f"if_tsresol 2^-{r & 0x7F} s is finer than "
                                   "2^-63 s")
                    f.ts_shift = r & 0x7F
                elif r > _MAX_DECIMAL_TSRES:
                    raise _err(s, base + o, f"if_tsresol 10^-{r} s is finer than "
                               f"10^-{_MAX_DECIMAL_TSRES} s")
                else:
                    f.ts_mul, f.ts_div = (10 ** (9 - r), 1) if r <= 9 else (1, 10 ** (r - 9))
            elif code == 14 and ln >= 8:  # if_tsoffset (seconds, signed)
                off = int.from_bytes(buf[o + 4:o + 12].tobytes(), "little" if e == "<" else "big",
                                     signed=True)
                if abs(off) > MAX_TS_NS // 2 // 1_000_000_000:
                    raise _err(s, base + o, f"if_tsoffset of {off} s is out of range "
                               "(at most 2^61 ns)")
                f.ts_offset_ns = off * 1_000_000_000
            o += 4 + (ln + 3) // 4 * 4
        return f


def _empty_records() -> Records:
    z = np.zeros(0, np.int64)
    return Records(z, z, z, z, np.zeros(0, np.uint16))


class _AddressBook:
    """Interns addresses across chunks: id 0 is 'no address'."""

    def __init__(self):
        self.ids: dict[tuple, int] = {}
        self.names: list[str] = [""]

    def _id(self, key: tuple) -> int:
        i = self.ids.get(key)
        if i is None:
            i = self.ids[key] = len(self.names)
            if key[0] == 4:
                self.names.append(str(ipaddress.IPv4Address(key[1])))
            else:
                raw = int(key[1]).to_bytes(8, "little") + int(key[2]).to_bytes(8, "little")
                self.names.append(str(ipaddress.IPv6Address(raw)))
        return i

    def intern(self, cols: dict[str, np.ndarray], keys: dict[str, np.ndarray]) -> None:
        """Fill cols src/dst from the raw address keys that decode returned."""
        if "i4" in keys:
            both = np.concatenate([keys["src4"], keys["dst4"]])
            codes, uniq = pd.factorize(both)
            lut = np.array([self._id((4, int(u))) for u in uniq], np.uint32)
            ids = lut[codes]
            n = len(keys["i4"])
            cols["src"][keys["i4"]], cols["dst"][keys["i4"]] = ids[:n], ids[n:]
        if "i6" in keys:
            both = np.concatenate([keys["src6"], keys["dst6"]])
            c1, u1 = pd.factorize(both[:, 0])
            c2, u2 = pd.factorize(both[:, 1])
            codes, uniq = pd.factorize(c1.astype(np.int64) * len(u2) + c2)
            lut = np.array([self._id((6, int(u1[u // len(u2)]), int(u2[u % len(u2)])))
                            for u in uniq], np.uint32)
            ids = lut[codes]
            n = len(keys["i6"])
            cols["src"][keys["i6"]], cols["dst"][keys["i6"]] = ids[:n], ids[n:]


def _open(path: Path, state: _State, head: bytes):
    if len(head) >= 24 and head[:4] in _PCAP_MAGICS:
        return _PcapWalker(state, head)
    if len(head) >= 12 and head[:4] == _PCAPNG_SHB:
        return _PcapngWalker(state, head)
    raise _err(state, 0, "not a pcap or pcapng file (unknown magic number)")


Progress = Callable[[str, int, int], None]
"""progress(path, bytes_read, total_bytes), called after each chunk is read."""


def stderr_progress(min_bytes: int = 256 << 20, every_s: float = 1.0,
                    stream: TextIO | None = None) -> Progress:
    """A `Progress` that prints ``capture: 42% (512/1200 MB)`` lines on stderr.

    min_bytes: captures smaller than this stay silent; every_s: at most one line per this
    many seconds (and one at the end); stream: where to print (default sys.stderr).
    """
    last = {"t": float("-inf")}

    def show(path: str, done: int, total: int) -> None:
        if total < min_bytes:
            return
        now = time.monotonic()
        if done < total and now - last["t"] < every_s:
            return
        last["t"] = now
        out = stream or sys.stderr
        print(f"{path}: {100 * done // max(total, 1)}% ({done / 1e6:.0f}/{total / 1e6:.0f} MB "
              "read)", file=out, flush=True)

    return show


def iter_records(path: str | os.PathLike, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                 progress: Progress | None = None
                 ) -> Iterator[tuple[np.ndarray, Records, _State]]:
    """Yield (buffer, records, state) per chunk; the buffer is reused by the next chunk.

    path: capture file; chunk_bytes: bytes read per chunk (grown when one record is larger,
    up to MAX_BLOCK_BYTES); progress: called with (path, bytes read, file size) per chunk.
    Memory: the buffer (chunk_bytes, at most twice the largest record) whatever the file size.
    """
    p = Path(path)
    state = _State(str(p))
    if not p.is_file():
        raise CaptureFormatError(f"{p}: no such capture file; check the path")
    try:
        fh = open(p, "rb")  # noqa: SIM115 (closed by the with below)
    except OSError as exc:
        raise CaptureFormatError(f"{p}: cannot read the capture ({exc.strerror})") from None
    with fh:
        head = fh.read(24)
        walker = _open(p, state, head)
        fh.seek(walker.first_record)
        base = walker.first_record  # file offset of buf[0]
        size = max(int(chunk_bytes), 64)
        buf = np.zeros(size + _PAD + 8, np.uint8)
        have = 0
        read, total = walker.first_record, os.fstat(fh.fileno()).st_size
        eof = False
        while True:
            if not eof:
                n = fh.readinto(memoryview(buf)[have:size])
                eof = n == 0 or have + n < size
                have += n
                read += n
                if progress is not None:
                    progress(str(p), read, max(total, read))
            buf[have:have + _PAD] = 0
            recs, stop = walker.records(buf, 0, have, base)
            if len(recs.data):
                yield buf, recs, state
            if eof and stop >= have:
                return
            if eof:
                raise _err(state, base + stop, "truncated record")
            if stop == 0:  # one record larger than the buffer: grow it
                size *= 2
                nb = np.zeros(size + _PAD + 8, np.uint8)
                nb[:have] = buf[:have]
                buf = nb
                continue
            rest = have - stop
            buf[:rest] = buf[stop:have]
            base += stop
            have = rest


def read_packets(path: str | os.PathLike, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                 progress: Progress | None = None) -> T.PacketTable:
    """Read and decode a whole capture into a `PacketTable`.

    path: pcap or pcapng file; chunk_bytes: read-buffer size (results do not depend on it);
    progress: see `iter_records`.
    Raises `CaptureFormatError` (file and byte offset) for a truncated or corrupt capture.
    """
    book = _AddressBook()
    parts: list[dict[str, np.ndarray]] = []
    side_parts: dict[str, list[dict[str, np.ndarray]]] = {k: [] for k in T.SIDE_COLUMNS}
    state = None
    rows = 0
    for buf, recs, state in iter_records(path, chunk_bytes, progress):
        lts = np.array([f.linktype for f in state.ifaces], np.int64)
        lt = int(lts[0]) if len(lts) == 1 else lts[recs.iface]
        cols, side, keys = D.decode(buf, recs.data, recs.caplen, lt)
        book.intern(cols, keys)
        cols["ts_ns"] = recs.ts_ns
        cols["iface"] = recs.iface
        cols["caplen"] = recs.caplen.astype(np.uint32)
        cols["wirelen"] = recs.wirelen.astype(np.uint32)
        parts.append(cols)
        for name, t in side.items():
            t["pkt"] = t["pkt"] + rows
            side_parts[name].append(t)
        rows += len(recs.data)
    if state is None:  # no packets: still validate the header
        state = _State(str(path))
        with open(path, "rb") as fh:
            _open(Path(path), state, fh.read(24))
    out = {}
    for c in T.PACKET_COLUMNS:  # column by column, so the peak stays near one table
        out[c.name] = np.concatenate([p.pop(c.name) for p in parts]).astype(c.dtype, copy=False) \
            if parts else np.zeros(0, c.dtype)
    side_out = {name: {c.name: np.concatenate([p[c.name] for p in ps]).astype(c.dtype)
                       for c in T.SIDE_COLUMNS[name]}
                for name, ps in side_parts.items() if ps}
    return T.PacketTable(str(path), [f.linktype for f in state.ifaces], book.names, out, side_out)
