"""What both capture formats share: the records of one chunk and how they are found.

`Records` holds the packet records found in one chunk buffer; `Iface` an interface's link
type and clock (pcapng's ``if_tsresol`` / ``if_tsoffset``, classic pcap's micro- or
nanoseconds); `ReaderState` what a walker knows about the file so far.  `chain` follows
records in bulk through candidate positions (see `analysis.pcap`); `u32`, `u32_pair` and
`read_int` read header words in the file's byte order.  The limits below bound what an
untrusted capture can make the reader do; each violation is a `CaptureFormatError`
(`format_error`: file and byte offset).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from analysis import decode as D
from testbed.core.errors import CaptureFormatError

MAX_CAPLEN = 262144            # libpcap's largest snapshot length
MAX_BLOCK_BYTES = 16 << 20     # largest pcapng block accepted (Wireshark: 16 MiB)
MAX_TS_NS = 1 << 62            # |timestamp| limit: about 146 years from 1970 (year 2116)
REMEDY = "the capture is truncated or corrupt; re-run the capture (stop tcpdump cleanly)"


@dataclass
class Records:
    """Packet records found in one chunk buffer (all arrays in record order)."""

    data: np.ndarray      # offset of the packet bytes in the buffer
    caplen: np.ndarray
    wirelen: np.ndarray
    ts_ns: np.ndarray
    iface: np.ndarray


@dataclass
class Iface:
    """An interface: link type, snapshot length, and its clock (units -> ns)."""

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
class ReaderState:
    """What a walker knows about the file so far."""

    path: str
    endian: str = "<"
    ns_per_frac: int = 1000
    ifaces: list[Iface] = field(default_factory=list)
    section_base: int = 0   # index in ifaces of the current pcapng section's interface 0


def format_error(state: ReaderState, offset: int, what: str) -> CaptureFormatError:
    """The error for a bad record at a file offset: file, offset, what, and the remedy."""
    return CaptureFormatError(f"{state.path}: {what} at byte offset {offset}; {REMEDY}")


def u32(buf: np.ndarray, pos: np.ndarray, endian: str) -> np.ndarray:
    """The 32-bit word at each position (int64), in the file's byte order."""
    v = D.Loader(buf).le64(pos)
    if endian == ">":
        return (v.byteswap() >> np.uint64(32)).astype(np.int64)
    return (v & np.uint64(0xFFFFFFFF)).astype(np.int64)


def u32_pair(buf: np.ndarray, pos: np.ndarray, endian: str) -> tuple[np.ndarray, np.ndarray]:
    """The two consecutive 32-bit words at each position, from one 8-byte load."""
    v = D.Loader(buf).le64(pos)
    if endian == ">":
        v = v.byteswap()
        return (v >> np.uint64(32)).astype(np.int64), (v & np.uint64(0xFFFFFFFF)).astype(np.int64)
    return (v & np.uint64(0xFFFFFFFF)).astype(np.int64), (v >> np.uint64(32)).astype(np.int64)


def read_int(buf: np.ndarray, pos: int, size: int, endian: str) -> int:
    """One unsigned integer of size bytes at pos, in the file's byte order."""
    return int.from_bytes(buf[pos:pos + size].tobytes(), "little" if endian == "<" else "big")


def chain(cands: np.ndarray, nxt: np.ndarray, pos: int, end: int,
          step: Callable[[int], int | None]) -> tuple[list[np.ndarray], int]:
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


def empty_records() -> Records:
    """No records."""
    z = np.zeros(0, np.int64)
    return Records(z, z, z, z, np.zeros(0, np.uint16))
