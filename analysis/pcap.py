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

Each format finds its own candidates and headers (`analysis.pcap_classic`,
`analysis.pcapng`; what they share: `analysis.pcap_records`); this module reads the file
chunk by chunk, hands each chunk to the format's walker and collects the table.  Decoding
then runs on whole arrays (`analysis.decode`).  Errors: `CaptureFormatError` naming the
file and byte offset of the first bad or truncated record.

Limits (a capture from someone else is untrusted input; every violation is a
`CaptureFormatError`, never another exception; the constants are in
`analysis.pcap_records`): a classic record holds at most `MAX_CAPLEN` bytes, a pcapng
block at most `MAX_BLOCK_BYTES`, so the read buffer never grows beyond twice that;
timestamps lie within +-`MAX_TS_NS` of 1970 (``if_tsresol`` down to 10^-19 or 2^-63 s,
``if_tsoffset`` within 2^61 ns); packet blocks need their Interface Description Block
first; IPv6 extension headers are followed at most four deep and never past the captured
bytes.
"""

from __future__ import annotations

import ipaddress
import os
import sys
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import TextIO

import numpy as np
import pandas as pd

from analysis import decode as D
from analysis import table as T
from analysis.pcap_classic import PCAP_MAGICS, PcapWalker
from analysis.pcap_records import ReaderState, Records, format_error
from analysis.pcapng import PCAPNG_SHB, PcapngWalker
from testbed.core.errors import CaptureFormatError

DEFAULT_CHUNK_BYTES = 1 << 19  # a chunk and its gathers stay in the CPU caches, and its
# temporaries stay small enough for malloc to reuse (1 MiB chunks made it map fresh pages
# for every chunk: a quarter of the reading time went to page faults)
_PAD = 64
_MAX_GUESS_ROWS = 1 << 24  # first capacity at most this (more is grown into, by half)


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


def open_walker(path: Path, state: ReaderState, head: bytes) -> PcapWalker | PcapngWalker:
    """The walker of the file's format, from its first bytes (head)."""
    if len(head) >= 24 and head[:4] in PCAP_MAGICS:
        return PcapWalker(state, head)
    if len(head) >= 12 and head[:4] == PCAPNG_SHB:
        return PcapngWalker(state, head)
    packed = next((name for magic, name in COMPRESSED if head.startswith(magic)), None)
    if packed is not None:  # read as it is: nothing is unpacked because a file says so
        raise CaptureFormatError(f"{path}: a {packed}-compressed file, not a capture; "
                                 f"decompress it first and give the .pcap or .pcapng")
    raise format_error(state, 0, "not a pcap or pcapng file (unknown magic number)")


COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"\x28\xb5\x2f\xfd", "zstd"),
              (b"\xfd7zXZ\x00", "xz"), (b"BZh", "bzip2"))


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
                 ) -> Iterator[tuple[np.ndarray, Records, ReaderState]]:
    """Yield (buffer, records, state) per chunk; the buffer is reused by the next chunk.

    path: capture file; chunk_bytes: bytes read per chunk (grown when one record is larger,
    up to MAX_BLOCK_BYTES); progress: called with (path, bytes read, file size) per chunk.
    Memory: the buffer (chunk_bytes, at most twice the largest record) whatever the file size.
    """
    p = Path(path)
    state = ReaderState(str(p))
    if not p.is_file():
        what = ("a folder, not a capture file; give the .pcap files in it" if p.is_dir()
                else "not a regular file (a FIFO, device or socket), not a capture"
                if p.exists() else "no such capture file; check the path")
        raise CaptureFormatError(f"{p}: {what}")
    try:
        fh = open(p, "rb")  # noqa: SIM115 (closed by the with below)
    except OSError as exc:
        raise CaptureFormatError(f"{p}: cannot read the capture ({exc.strerror})") from None
    with fh:
        head = fh.read(24)
        walker = open_walker(p, state, head)
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
                raise format_error(state, base + stop, "truncated record")
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


class _ColumnStore:
    """Packet columns filled chunk by chunk in place (no per-chunk parts to concatenate).

    Capacity is estimated from the first chunk's bytes per record and the file size and
    grown by half when too small; the rows past the end are never written, so their pages
    are never made resident.
    """

    def __init__(self, columns: tuple[T.Column, ...] = T.PACKET_COLUMNS):
        self.columns = columns
        self.cols: dict[str, np.ndarray] = {}
        self.rows = 0

    def append(self, cols: dict[str, np.ndarray], n: int, expect: int) -> None:
        """Copy n rows of cols in; expect: estimated rows in the whole file."""
        need = self.rows + n
        cap = len(self.cols["ts_ns"]) if self.cols else 0
        if need > cap:  # an estimate from a strange first chunk is trusted only so far
            cap = max(need, min(expect, _MAX_GUESS_ROWS), cap + cap // 2, 1024)
            for c in self.columns:
                grown = np.empty(cap, c.dtype)
                if self.rows:
                    grown[:self.rows] = self.cols[c.name][:self.rows]
                self.cols[c.name] = grown
        for c in self.columns:
            self.cols[c.name][self.rows:need] = cols[c.name]
        self.rows = need

    def finish(self) -> dict[str, np.ndarray]:
        """The columns, rows 0 .. rows - 1."""
        if not self.cols:
            return T.empty_columns(self.columns)
        return {k: v[:self.rows] for k, v in self.cols.items()}


def read_packets(path: str | os.PathLike, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                 progress: Progress | None = None, columns: Collection[str] | None = None
                 ) -> T.PacketTable:
    """Read and decode a whole capture into a `PacketTable`.

    path: pcap or pcapng file; chunk_bytes: read-buffer size (results do not depend on it);
    progress: see `iter_records`; columns: the packet columns to keep (default: all of
    `table.PACKET_COLUMNS`; fewer hold less memory).
    Raises `CaptureFormatError` (file and byte offset) for a truncated or corrupt capture.
    """
    book = _AddressBook()
    store = _ColumnStore(T.PACKET_COLUMNS if columns is None else
                         tuple(c for c in T.PACKET_COLUMNS if c.name in set(columns)))
    side_parts: dict[str, list[dict[str, np.ndarray]]] = {k: [] for k in T.SIDE_COLUMNS}
    state = None
    rows = 0
    try:
        size = max(os.path.getsize(path), 1)
    except OSError:
        size = 1
    for buf, recs, state in iter_records(path, chunk_bytes, progress):
        lts = np.array([f.linktype for f in state.ifaces], np.int64)
        lt = int(lts[0]) if len(lts) == 1 else lts[recs.iface]
        n = len(recs.data)
        cols, side, keys = D.decode(buf, recs.data, recs.caplen, lt)
        book.intern(cols, keys)
        cols["ts_ns"] = recs.ts_ns
        cols["iface"] = recs.iface
        cols["caplen"] = recs.caplen
        cols["wirelen"] = recs.wirelen
        span = int(recs.data[-1] - recs.data[0]) + int(recs.caplen[-1]) + 16
        store.append(cols, n, int(size * n / max(span, 1) * 1.05) + 1024)
        for name, t in side.items():
            t["pkt"] = t["pkt"] + rows
            side_parts[name].append(t)
        rows += n
    if state is None:  # no packets: still validate the header
        state = ReaderState(str(path))
        with open(path, "rb") as fh:
            open_walker(Path(path), state, fh.read(24))
    known = [f.linktype for f in state.ifaces if f.linktype in D.SUPPORTED_LINKTYPES]
    if state.ifaces and not known:
        kinds = ", ".join(sorted({str(f.linktype) for f in state.ifaces}))
        raise CaptureFormatError(
            f"{path}: link type {kinds} is none the analysis decodes (it reads "
            f"{', '.join(sorted(set(D.SUPPORTED_LINKTYPES.values())))}); capture on an "
            "Ethernet or IP interface, e.g. tcpdump -i <interface> -w FILE")
    side_out = {name: {c.name: np.concatenate([p[c.name] for p in ps]).astype(c.dtype)
                       for c in T.SIDE_COLUMNS[name]}
                for name, ps in side_parts.items() if ps}
    return T.PacketTable(str(path), [f.linktype for f in state.ifaces], book.names,
                         store.finish(), side_out)
