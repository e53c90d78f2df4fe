"""MPTCP's data level in one capture: data sequence numbers across a connection's subflows.

Each data segment's DSN is its DSS mapping's DSN plus its offset in the mapping (a mapping
carries forward to the packets that carry none; MPTCP v1's first data may ride on the third
ACK's MP_CAPABLE), relative to the connection's IDSN when its key was captured, else to the
first DSN seen.  A segment whose data had been seen before (at the same DSN, or cut at
other boundaries: MPTCP maps data it sends again anew) is a reinjection or retransmission;
reordering is classified as on subflows (`analysis.sequence.reorder_analysis`), without
the timestamp rule, since each subflow's TSvals run on a clock of its own.  `connection_table` sums
it up per connection.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import table as T
from analysis.flows import Flows, key_token
from analysis.sequence import first_seen_bytes, group_starts, reorder_analysis, unwrap32


def key_origins(flows: pd.DataFrame, ddir: np.ndarray) -> dict[str, int]:
    """Token -> data-level origin (the data sender's IDSN + 1) of every connection whose
    initial subflow's key was captured.  flows: `Flows.flows`; ddir: data direction per flow."""
    origin = {}
    for f in flows.index[flows["mptcp_role"] == "initial"]:
        key = flows.loc[f, "mptcp_key_fwd" if ddir[f] == 0 else "mptcp_key_rev"]
        if pd.notna(key):
            origin[flows.loc[f, "mptcp_token"]] = key_token(int(key))[1] + 1
    return origin


# the columns of `dsn_analysis` and their types, which an empty result keeps: frames of
# several captures are concatenated, and an untyped empty one would turn the boolean
# columns into objects (``~`` of a Python bool is -1 or -2, not its negation)
DSN_COLUMNS = {"token": "str", "flow": "int64", "row": "int64", "ts": "int64",
               "dsn": "int64", "end": "int64", "reinjected": "bool", "reordered": "bool",
               "extent": "int64", "new": "int64"}


def _no_segments() -> pd.DataFrame:
    return pd.DataFrame({k: pd.Series(dtype=t) for k, t in DSN_COLUMNS.items()})


def dsn_analysis(tbl: T.PacketTable, fl: Flows, seg: pd.DataFrame, ddir: np.ndarray,
                 origins: dict[str, int] | None = None) -> pd.DataFrame:
    """MPTCP data-level analysis of the data segments of every connection in this capture.

    origins: `key_origins` from the other captures of the run, for connections whose key
    this capture lacks (a join subflow's interface), so that DSNs compare across captures.
    Returns one row per data segment that can be mapped: token, flow, row, ts, dsn (relative to the
    connection's IDSN when its key was captured here or is in origins), end, reinjected,
    reordered, extent.
    """
    c = tbl.cols
    flows = fl.flows
    tok = flows["mptcp_token"].to_numpy()
    fdir = ddir[seg["flow"].to_numpy()]
    d = seg[(seg["dir"].to_numpy() == fdir) & (tok[seg["flow"].to_numpy()] != "")].copy()
    if not len(d):
        return _no_segments()
    rows = d["row"].to_numpy()
    has_map = (c["dss_flags"][rows] & T.DSS_M) != 0
    m_dsn = c["dsn"][rows].copy()
    m_ssn = c["ssn"][rows].astype(np.int64)
    m_dsn8 = (c["dss_flags"][rows] & T.DSS_m) != 0
    # MPTCP v1: the first data may ride on the third ACK's MP_CAPABLE (an implicit mapping
    # at DSN = IDSN + 1, SSN = 1, RFC 8684 section 3.1)
    cap = tbl.side_frame("mp_capable")
    cap = cap[(cap["data_len"] > 0) & (cap["sender_key"] != 0)]
    if len(cap):
        pos = pd.Series(np.arange(len(rows)), index=rows)
        hit = cap[cap["pkt"].isin(pos.index)]
        at = pos[hit["pkt"]].to_numpy()
        m_dsn[at] = [(key_token(int(k))[1] + 1) % (1 << 64) for k in hit["sender_key"]]
        m_ssn[at] = 1
        m_dsn8[at] = True
        has_map[at] = True
    # carry each flow's latest mapping forward to the packets that carry none
    fl_ = d["flow"].to_numpy()
    st = group_starts(fl_)
    idx = np.where(has_map, np.arange(len(d)), -1)
    gi = np.cumsum(st) - 1
    lift = gi * (len(d) + 1)
    last = np.maximum.accumulate(idx + lift) - lift
    ok = last >= 0
    src = np.maximum(last, 0)
    d["map_dsn"] = m_dsn[src]
    d["map_ssn"] = m_ssn[src]
    d["dsn8"] = m_dsn8[src]
    d = d[ok & (d["payload"] > 0).to_numpy()]
    if not len(d):
        return _no_segments()
    # subflow sequence offset: SSN is relative to the subflow ISN (first data byte = 1)
    syn = flows["syn_seen"].to_numpy()[d["flow"].to_numpy()]
    firstmap = d.groupby("flow")[["seq", "map_ssn"]].transform("first")
    k = np.where(syn, 1, (firstmap["map_ssn"] - firstmap["seq"]).to_numpy())
    raw = (d["map_dsn"].astype(np.uint64).to_numpy()
           + (d["seq"].to_numpy() + k - d["map_ssn"].to_numpy().astype(np.int64)).astype(np.uint64))
    d["token"] = tok[d["flow"].to_numpy()]
    d = d.assign(raw=raw).sort_values(["token", "row"], kind="stable")
    # relative DSN: to the IDSN when the key is known, else to the first DSN seen
    origin = {**(origins or {}), **key_origins(flows, ddir)}
    tokens = d["token"].to_numpy()
    rawv = d["raw"].to_numpy().astype(np.uint64)
    first_raw = d.groupby("token")["raw"].transform("first").to_numpy().astype(np.uint64)
    orig = np.array([origin.get(t, 0) for t in tokens], np.uint64)
    orig = np.where(orig == 0, first_raw, orig)
    short = ~d["dsn8"].to_numpy().astype(bool)
    rel = (rawv - orig).astype(np.int64)
    if short.any():  # 4-octet DSNs: unwrap within the connection
        gid = pd.factorize(tokens)[0]
        rel_short = unwrap32((rawv & np.uint64(0xFFFFFFFF)).astype(np.uint32),
                             (orig & np.uint64(0xFFFFFFFF)).astype(np.uint32), gid)
        rel = np.where(short, rel_short, rel)
    payload = d["payload"].to_numpy()
    return classified(pd.DataFrame({"token": tokens, "flow": d["flow"].to_numpy(),
                                    "row": d["row"].to_numpy(), "ts": d["ts"].to_numpy(),
                                    "dsn": rel, "end": rel + payload}))


def classified(dsn: pd.DataFrame) -> pd.DataFrame:
    """dsn (token, dsn, end, ... of data segments in arrival order, rows of one
    connection contiguous) with each segment's class at the data level: ``new`` (bytes no
    earlier segment of the connection carried), ``reinjected``, ``reordered``, ``extent``
    (`analysis.sequence.reorder_analysis`, without the timestamp rule: each subflow's
    TSvals run on a clock of their own)."""
    gid = pd.factorize(dsn["token"].to_numpy())[0]
    start, end = dsn["dsn"].to_numpy(), dsn["end"].to_numpy()
    new = first_seen_bytes(gid, start, end)
    ra = reorder_analysis(gid, start, end, new_bytes=new)
    return dsn.assign(reinjected=ra["retrans"], reordered=ra["reordered"],
                      extent=ra["extent"], new=new)


def arrival_order(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The data-level rows of several captures of one receiver (`dsn_analysis` frames) as
    one stream per connection, in the order they arrived at any of the receiver's
    interfaces (capture time, then capture), classified again over that stream: a segment
    is reordered or sent again with respect to what arrived on every interface."""
    parts = [p.assign(_cap=k) for k, p in enumerate(parts) if len(p)]
    if not parts:
        return _no_segments()
    if len(parts) == 1:
        return parts[0].drop(columns="_cap")
    d = pd.concat(parts, ignore_index=True).sort_values(["token", "ts", "_cap"],
                                                        kind="stable")
    return classified(d.drop(columns="_cap").reset_index(drop=True))


def connection_table(dsn: pd.DataFrame, flows: pd.DataFrame) -> pd.DataFrame:
    """One row per MPTCP connection: subflows, data bytes, data-level reordering."""
    cols = ["token", "subflows", "data_bytes", "start", "end", "data_packets", "reinjections",
            "dsn_reordered_packets", "dsn_reorder_ratio", "dsn_reorder_extent_max"]
    if not len(dsn):
        return pd.DataFrame({k: [] for k in cols})
    dsn = dsn.astype({"reinjected": bool, "reordered": bool})  # whatever a concat made
    g = dsn.groupby("token")
    uniq = (~dsn["reinjected"]).groupby(dsn["token"]).sum()
    # bytes carried once: the union of the data-sequence ranges (a range the sender had
    # assigned but nobody saw by the end -- still queued or lost -- is not counted)
    byt = dsn.sort_values("token", kind="stable")
    once = byt["new"] if "new" in byt else pd.Series(first_seen_bytes(
        pd.factorize(byt["token"])[0], byt["dsn"].to_numpy(), byt["end"].to_numpy()),
        index=byt.index)
    sub = flows[flows["mptcp_token"] != ""].groupby("mptcp_token").size()
    out = pd.DataFrame({
        "subflows": sub.reindex(g.size().index).fillna(0).astype(int),
        "data_bytes": once.groupby(byt["token"]).sum(),
        "start": g["ts"].min() / 1e9, "end": g["ts"].max() / 1e9,
        "data_packets": uniq,
        "reinjections": g["reinjected"].sum(),
        "dsn_reordered_packets": g["reordered"].sum(),
        "dsn_reorder_ratio": (g["reordered"].sum() / uniq.clip(lower=1)).where(uniq > 0),
        "dsn_reorder_extent_max": g["extent"].max()}).reset_index()
    return out[cols]
