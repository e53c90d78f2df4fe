"""The decoded packet table: one registry of columns, their dtypes and labels.

A capture decodes into a `PacketTable`: fixed-width numpy columns (one value per packet,
about 80 bytes per packet in all) plus small side tables for the rare, variable-size
things (SACK blocks, SYN options, MPTCP MP_CAPABLE keys and MP_JOIN tokens), keyed by
the packet's row number.  Addresses are interned: ``src``/``dst`` hold ids into
``addresses`` (text form), so IPv4 and IPv6 share two 4-byte columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa


class Column(NamedTuple):
    """A packet-table column: name, numpy dtype, label for plots and docs."""

    name: str
    dtype: str
    label: str


NO_VALUE = 0  # value of a field the packet does not carry (check the flag columns)

# option-presence bits in column ``opts``
OPT_TS = 1
OPT_SACK = 2
OPT_MSS = 4
OPT_WSCALE = 8
OPT_SACK_PERM = 16
OPT_MPTCP = 32

# DSS flag bits (RFC 8684 section 3.3)
DSS_A = 0x01  # data ACK present
DSS_a = 0x02  # data ACK is 8 octets
DSS_M = 0x04  # DSN, subflow sequence number, data-level length present
DSS_m = 0x08  # DSN is 8 octets
DSS_F = 0x10  # DATA_FIN

# MPTCP option subtypes (bit ``1 << subtype`` set in ``mp_subtypes``)
MP_CAPABLE = 0
MP_JOIN = 1
MP_DSS = 2
MP_ADD_ADDR = 3
MP_REMOVE_ADDR = 4
MP_PRIO = 5
MP_FAIL = 6
MP_FASTCLOSE = 7
MP_TCPRST = 8

# TCP flag bits
FIN, SYN, RST, PSH, ACK, URG, ECE, CWR = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80

PACKET_COLUMNS: tuple[Column, ...] = (
    Column("ts_ns", "int64", "capture time (ns since the epoch)"),
    Column("iface", "uint16", "capture interface index (pcapng; 0 for pcap)"),
    Column("caplen", "uint32", "captured length (bytes)"),
    Column("wirelen", "uint32", "length on the wire (bytes)"),
    Column("ip_ver", "uint8", "IP version (0: not IP)"),
    Column("proto", "uint8", "IP protocol (6 TCP, 17 UDP)"),
    Column("src", "uint32", "source address id"),
    Column("dst", "uint32", "destination address id"),
    Column("sport", "uint16", "source port"),
    Column("dport", "uint16", "destination port"),
    Column("payload", "uint32", "transport payload (bytes)"),
    Column("tcp_flags", "uint8", "TCP flags"),
    Column("seq", "uint32", "TCP sequence number"),
    Column("ack", "uint32", "TCP acknowledgement number"),
    Column("win", "uint16", "TCP window field (unscaled)"),
    Column("opts", "uint8", "TCP options present (OPT_* bits)"),
    Column("tsval", "uint32", "TCP timestamp value"),
    Column("tsecr", "uint32", "TCP timestamp echo reply"),
    Column("sack_n", "uint8", "number of SACK blocks"),
    Column("mp_subtypes", "uint16", "MPTCP option subtypes present (1 << subtype)"),
    Column("dss_flags", "uint8", "MPTCP DSS flags"),
    Column("dsn", "uint64", "MPTCP data sequence number (raw, 4 or 8 octets)"),
    Column("data_ack", "uint64", "MPTCP data ACK (raw, 4 or 8 octets)"),
    Column("ssn", "uint32", "MPTCP subflow sequence number of the mapping (relative)"),
    Column("dll", "uint16", "MPTCP data-level length of the mapping"),
)

SIDE_COLUMNS: dict[str, tuple[Column, ...]] = {
    "sack": (Column("pkt", "int64", "packet row"), Column("left", "uint32", "SACK left edge"),
             Column("right", "uint32", "SACK right edge")),
    "syn": (Column("pkt", "int64", "packet row"), Column("mss", "uint16", "MSS option"),
            Column("wscale", "int8", "window scale shift (-1: none)"),
            Column("sack_perm", "bool", "SACK permitted")),
    "mp_capable": (Column("pkt", "int64", "packet row"), Column("version", "uint8", "version"),
                   Column("flags", "uint8", "flags"),
                   Column("sender_key", "uint64", "sender's key (0: absent)"),
                   Column("receiver_key", "uint64", "receiver's key (0: absent)"),
                   Column("data_len", "uint16", "data-level length of data sent with the "
                          "third ACK (0: none)")),
    "mp_join": (Column("pkt", "int64", "packet row"), Column("backup", "bool", "backup flag"),
                Column("addr_id", "uint8", "address id"),
                Column("token", "uint32", "receiver's token (SYN only; 0 otherwise)"),
                Column("nonce", "uint32", "sender's random number (SYN, SYN/ACK)")),
}


def empty_columns(columns: tuple[Column, ...], n: int = 0) -> dict[str, np.ndarray]:
    """Zero-filled numpy columns. columns: the registry to follow; n: rows."""
    return {c.name: np.zeros(n, dtype=c.dtype) for c in columns}


@dataclass
class PacketTable:
    """Decoded packets of one capture file.

    path: the capture; linktypes: link type per interface; addresses: address id -> text;
    cols: packet columns (PACKET_COLUMNS); side: side tables (SIDE_COLUMNS), keyed by row.
    """

    path: str
    linktypes: list[int]
    addresses: list[str]
    cols: dict[str, np.ndarray]
    side: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.cols["ts_ns"])

    @property
    def nbytes(self) -> int:
        """Memory held by the columns and side tables (bytes)."""
        total = sum(a.nbytes for a in self.cols.values())
        total += sum(a.nbytes for t in self.side.values() for a in t.values())
        return total

    def side_frame(self, name: str) -> pd.DataFrame:
        """A side table as a DataFrame (empty with the right columns when absent)."""
        cols = self.side.get(name) or empty_columns(SIDE_COLUMNS[name])
        return pd.DataFrame(cols)

    def to_pandas(self, resolve_addresses: bool = True) -> pd.DataFrame:
        """The packet columns as a DataFrame.

        resolve_addresses: add text columns ``src_addr`` / ``dst_addr``.
        """
        df = pd.DataFrame(self.cols, copy=False)
        if resolve_addresses:
            cat = pd.Categorical.from_codes
            names = self.addresses or [""]
            df["src_addr"] = cat(np.minimum(self.cols["src"], len(names) - 1), categories=names)
            df["dst_addr"] = cat(np.minimum(self.cols["dst"], len(names) - 1), categories=names)
        return df

    def to_arrow(self) -> pa.Table:
        """The packet columns as an Arrow table (zero-copy), addresses as a dictionary column."""
        arrays = {k: pa.array(v) for k, v in self.cols.items()}
        names = pa.array(self.addresses or [""], pa.string())
        for k in ("src", "dst"):
            arrays[k + "_addr"] = pa.DictionaryArray.from_arrays(
                pa.array(self.cols[k].astype(np.int32)), names)
        return pa.table(arrays)
