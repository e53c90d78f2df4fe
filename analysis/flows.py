"""Flows from a packet table: TCP connections, MPTCP connections and subflows, UDP flows.

A TCP connection is a 4-tuple split at each new SYN (a SYN with a new sequence number);
its initiator is the SYN's sender, or, when the SYN was not captured, the sender of its
first packet.  MPTCP subflows are grouped into connections by token: the token of a key
is the top 32 bits of SHA-256(key) (RFC 8684 section 3.1); the initial subflow's keys come
from MP_CAPABLE and each further subflow names its connection's token in MP_JOIN.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis import table as T

FLOW_KEY_COLUMNS = ["proto", "src_addr", "sport", "dst_addr", "dport"]


@dataclass
class Flows:
    """Flow assignment of one capture.

    pkt_flow: flow index per packet (-1: not TCP/UDP); pkt_dir: 0 initiator->responder,
    1 back; flows: one row per flow (index = flow index) with endpoints, protocol, ISNs and
    MPTCP grouping (``mptcp_token``: the connection's token as hex, "" for plain TCP).
    """

    pkt_flow: np.ndarray
    pkt_dir: np.ndarray
    flows: pd.DataFrame


def key_token(key: int) -> tuple[int, int]:
    """(token, IDSN) of an MPTCP key: SHA-256's top 32 bits and low 64 bits."""
    d = hashlib.sha256(int(key).to_bytes(8, "big")).digest()
    return int.from_bytes(d[:4], "big"), int.from_bytes(d[-8:], "big")


def find_flows(tbl: T.PacketTable) -> Flows:
    """Assign every TCP/UDP packet of tbl to a flow and describe the flows.

    tbl: a decoded capture.
    """
    c = tbl.cols
    n = len(tbl)
    is_l4 = ((c["proto"] == 6) | (c["proto"] == 17)) & (c["ip_ver"] > 0)
    rows = np.flatnonzero(is_l4)
    if len(tbl.addresses) < (1 << 15):  # (lo, hi, proto) fits one 64-bit key: one hash pass
        tuple_id, _ = pd.factorize(_tuple_keys(c, rows))
    else:  # codes in order of first appearance either way, so the ids are the same
        a = (c["src"][rows].astype(np.uint64) << np.uint64(16)) | c["sport"][rows]
        b = (c["dst"][rows].astype(np.uint64) << np.uint64(16)) | c["dport"][rows]
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        is_tcp = (c["proto"][rows] == 6).astype(np.uint64)
        k1, _ = pd.factorize(lo)
        k2, u2 = pd.factorize(hi)
        k3 = (k1.astype(np.int64) * max(len(u2), 1) + k2) * 2 + is_tcp.astype(np.int64)
        tuple_id, _ = pd.factorize(k3)
    flags = c["tcp_flags"][rows]
    syn = ((flags & (T.SYN | T.ACK)) == T.SYN) & (c["proto"][rows] == 6)
    # split a 4-tuple at each SYN with a new ISN (port reuse)
    order = _tuple_time_order(tuple_id, c["ts_ns"][rows])
    srt = rows[order]  # packet rows by 4-tuple, then time
    tid, sy = tuple_id[order], syn[order]
    del order, tuple_id, syn
    syn_idx = np.flatnonzero(sy)
    sq = c["seq"][srt[syn_idx]]  # the SYNs' sequence numbers
    new = np.zeros(len(tid), bool)
    if len(tid):
        new = np.r_[True, tid[1:] != tid[:-1]]  # each 4-tuple starts a flow
    if len(syn_idx):  # ... and so does a SYN that is not a retransmission of the last one
        prev_same = np.r_[False, tid[syn_idx[1:]] == tid[syn_idx[:-1]]]
        prev_seq = np.r_[0, sq[:-1]]
        new[syn_idx] |= ~(prev_same & (prev_seq == sq))
    del tid
    flow_sorted = np.cumsum(new) - 1
    pkt_flow = np.full(n, -1, np.int64)
    pkt_flow[srt] = flow_sorted
    nflows = int(flow_sorted[-1]) + 1 if len(flow_sorted) else 0

    # initiator: sender of the flow's first SYN, else of its first packet
    first = np.flatnonzero(new)
    init_src = c["src"][srt[first]]
    init_sport = c["sport"][srt[first]]
    syn_pos = np.flatnonzero(sy)
    syn_seen = np.zeros(nflows, bool)
    if len(syn_pos):
        fsyn = flow_sorted[syn_pos]
        firsts = np.unique(fsyn, return_index=True)[1]
        sp = syn_pos[firsts]
        syn_seen[fsyn[firsts]] = True
        init_src[fsyn[firsts]] = c["src"][srt[sp]]
        init_sport[fsyn[firsts]] = c["sport"][srt[sp]]
    fl = pkt_flow[rows]
    pkt_dir = np.zeros(n, np.uint8)
    pkt_dir[rows] = ~((c["src"][rows] == init_src[fl]) & (c["sport"][rows] == init_sport[fl]))
    flows = _describe(tbl, rows, fl, pkt_dir[rows], nflows, syn_seen)
    _group_mptcp(tbl, pkt_flow, pkt_dir, flows)
    return Flows(pkt_flow, pkt_dir, flows)


def _tuple_keys(c: dict[str, np.ndarray], rows: np.ndarray, block: int = 1 << 16
                ) -> np.ndarray:
    """One uint64 per packet of rows naming its 4-tuple and protocol, either direction:
    ``((lo << 32 | hi) << 1) | is_tcp`` with lo/hi the smaller/larger of (address id << 16
    | port) of the two ends (address ids below 2^15).  Computed a block at a time, so the
    temporaries stay small whatever the capture's size."""
    out = np.empty(len(rows), np.uint64)
    for i in range(0, len(rows), block):
        r = rows[i:i + block]
        a = (c["src"][r].astype(np.uint64) << np.uint64(16)) | c["sport"][r]
        b = (c["dst"][r].astype(np.uint64) << np.uint64(16)) | c["dport"][r]
        key = np.minimum(a, b) << np.uint64(32)
        key |= np.maximum(a, b)
        key <<= np.uint64(1)
        key |= c["proto"][r] == 6
        out[i:i + block] = key
    return out


def _tuple_time_order(tuple_id: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """``np.lexsort((ts, tuple_id))``: by 4-tuple, then time, then row.  When the times
    already rise in row order (the usual capture), one stable sort of the tuple ids (narrowed
    so that numpy's radix sort applies) gives the same order."""
    if len(ts) < 2 or not (ts[1:] >= ts[:-1]).all():
        return np.lexsort((ts, tuple_id))
    top = int(tuple_id.max()) if len(tuple_id) else 0
    narrow = tuple_id.astype(np.uint16 if top < (1 << 16) else np.uint32 if top < (1 << 32)
                             else np.int64)
    return np.argsort(narrow, kind="stable")


def _describe(tbl: T.PacketTable, rows: np.ndarray, fl: np.ndarray, d: np.ndarray, nflows: int,
              syn_seen: np.ndarray) -> pd.DataFrame:
    c = tbl.cols
    names = np.array(tbl.addresses, dtype=object)
    fields = {"dir": d, "src": c["src"], "dst": c["dst"], "sport": c["sport"],
              "dport": c["dport"], "proto": c["proto"], "ts": c["ts_ns"], "seq": c["seq"],
              "flags": c["tcp_flags"]}
    fwd = _first_per_flow(fields, rows, fl, d == 0)
    any_ = _first_per_flow(fields, rows, fl, None)
    rev = _first_per_flow(fields, rows, fl, d == 1)
    out = pd.DataFrame(index=pd.RangeIndex(nflows, name="flow"))
    base = fwd.reindex(out.index)
    miss = base["src"].isna()
    if miss.any():  # no packet from the initiator (only the reverse direction seen)
        alt = any_.reindex(out.index)[miss]
        base.loc[miss, ["src", "dst", "sport", "dport"]] = alt[["dst", "src", "dport",
                                                                "sport"]].to_numpy()
        base.loc[miss, "proto"] = alt["proto"]
    out["proto"] = np.where(base["proto"].to_numpy() == 6, "tcp", "udp")
    out["src_addr"] = names[base["src"].astype(np.int64).to_numpy()]
    out["sport"] = base["sport"].astype(np.int64).to_numpy()
    out["dst_addr"] = names[base["dst"].astype(np.int64).to_numpy()]
    out["dport"] = base["dport"].astype(np.int64).to_numpy()
    out["syn_seen"] = syn_seen
    sp = np.flatnonzero((c["tcp_flags"][rows] & T.SYN) != 0)
    isn = pd.DataFrame({"flow": fl[sp], "dir": d[sp], "seq": c["seq"][rows[sp]]}
                       ).groupby(["flow", "dir"])["seq"].first()
    out["isn_fwd"] = isn.xs(0, level="dir").reindex(out.index) if 0 in isn.index.get_level_values(
        "dir") else np.nan
    out["isn_rev"] = isn.xs(1, level="dir").reindex(out.index) if 1 in isn.index.get_level_values(
        "dir") else np.nan
    out["first_seq_fwd"] = base["seq"].to_numpy()
    out["first_seq_rev"] = rev["seq"].reindex(out.index).to_numpy()
    out["mptcp_token"] = ""
    out["mptcp_role"] = ""
    return out


def _first_per_flow(fields: dict[str, np.ndarray], rows: np.ndarray, fl: np.ndarray,
                    mask: np.ndarray | None) -> pd.DataFrame:
    """Per flow, the fields of its first packet (in row order) where mask holds.

    fields: ``dir`` per element of rows, the others per packet of the table; rows: packet
    rows; fl: flow per element of rows.  As ``DataFrame(...)[mask].groupby("flow").first()``
    (no column holds NaN), without building the per-packet frame."""
    sel = np.arange(len(fl)) if mask is None else np.flatnonzero(mask)
    f = fl[sel]
    first = np.full(int(f.max()) + 1 if len(f) else 0, len(sel), np.int64)
    np.minimum.at(first, f, np.arange(len(sel)))
    flows = np.flatnonzero(first < len(sel))
    at = sel[first[flows]]
    return pd.DataFrame({k: v[at] if k == "dir" else v[rows[at]] for k, v in fields.items()},
                        index=pd.Index(flows, name="flow"))


def _group_mptcp(tbl: T.PacketTable, pkt_flow: np.ndarray, pkt_dir: np.ndarray,
                 flows: pd.DataFrame) -> None:
    """Fill mptcp_token (server-side token, hex) and mptcp_role (initial / join)."""
    cap = tbl.side_frame("mp_capable")
    join = tbl.side_frame("mp_join")
    keys: dict[int, dict[int, int]] = {}  # flow -> {dir: key}
    for r in cap.itertuples(index=False):
        f = int(pkt_flow[r.pkt])
        if f < 0:
            continue
        d = int(pkt_dir[r.pkt])
        if r.sender_key:
            keys.setdefault(f, {})[d] = int(r.sender_key)
        if r.receiver_key:
            keys.setdefault(f, {})[1 - d] = int(r.receiver_key)
    token_of_flow: dict[int, str] = {}
    flows["mptcp_key_fwd"] = pd.Series([None] * len(flows), dtype=object, index=flows.index)
    flows["mptcp_key_rev"] = pd.Series([None] * len(flows), dtype=object, index=flows.index)
    for f, kd in keys.items():
        if 1 in kd:
            token_of_flow[f] = f"{key_token(kd[1])[0]:08x}"
        elif 0 in kd:
            token_of_flow[f] = f"c{key_token(kd[0])[0]:08x}"
        for d, k in kd.items():
            flows.at[f, "mptcp_key_fwd" if d == 0 else "mptcp_key_rev"] = int(k)
        flows.loc[f, "mptcp_role"] = "initial"
    # flows whose MP_CAPABLE keys were not captured but that carry MP_CAPABLE / DSS
    mp_flow = pkt_flow[tbl.cols["mp_subtypes"] != 0]
    for f in np.flatnonzero(np.bincount(mp_flow[mp_flow >= 0], minlength=len(flows))):
        if flows.loc[f, "mptcp_role"] == "":
            flows.loc[f, "mptcp_role"] = "unknown"
    client_tokens = {}
    for f, kd in keys.items():
        if 0 in kd and 1 in kd:
            client_tokens[f"{key_token(kd[0])[0]:08x}"] = token_of_flow[f]
    for r in join.itertuples(index=False):
        f = int(pkt_flow[r.pkt])
        if f < 0 or not r.token:
            continue
        t = f"{int(r.token):08x}"
        token_of_flow[f] = client_tokens.get(t, t)  # a join sent by the server names the client
        flows.loc[f, "mptcp_role"] = "join"
    for f, t in token_of_flow.items():
        flows.loc[f, "mptcp_token"] = t
