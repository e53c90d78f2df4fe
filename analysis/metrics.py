"""Per-flow metrics of one capture: sequence analysis, FCT, throughput, reordering, RTT.

Definitions (all at the capture point of the table):

* A *data segment* is a TCP packet with payload.  Sequence numbers are unwrapped to 64 bits
  relative to the ISN (SYN seen) or to the first packet of the direction.
* A segment is *behind* when it starts below the highest byte seen so far in its flow
  direction (RFC 4737's NextExp).  A behind segment is a *retransmission* when its start
  was seen before or, with TCP timestamps, when its TSval is newer than every earlier
  segment's (it was sent later, so the network did not reorder it); otherwise it is
  *reordered*.  Reordered-packet ratio = reordered / (unique segments), reordering extent
  of a reordered packet = its arrival index minus that of the first packet with a higher
  sequence number (RFC 4737 sections 4.1 and 4.2.1).  A flow's ``retransmissions`` also
  counts SYNs and FINs sent again, in both directions (as tshark does); its
  ``loss_estimate`` is data retransmissions / unique data segments.
* MPTCP data level: the same, on each packet's data sequence number (DSN of its DSS mapping
  plus its offset in the mapping) across all subflows of a connection; a DSN seen before
  is a reinjection or retransmission.
* FCT: first SYN (or first packet) to the first ACK covering the last data byte.
* RTT samples: a new, never-retransmitted segment to the first ACK covering it (Karn).
* Delivered bytes: how far each ACK from the data receiver moves the cumulative
  acknowledgement beyond every earlier one -- the bytes handed to the application in
  order.  Unlike goodput counted from the sender's data segments, it leaves out data the
  sender transmitted that a queue then dropped.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import table as T
from analysis.flows import Flows, key_token
from testbed.core.errors import InputError

_W32 = 1 << 32


def _starts(group: np.ndarray) -> np.ndarray:
    return np.r_[True, group[1:] != group[:-1]] if len(group) else np.zeros(0, bool)


def _group_cumsum(v: np.ndarray, starts: np.ndarray) -> np.ndarray:
    cs = np.cumsum(v)
    idx = np.flatnonzero(starts)
    before = np.r_[0, cs[idx[1:] - 1]] if len(idx) else np.zeros(0, cs.dtype)
    lengths = np.diff(np.r_[idx, len(v)])
    return cs - np.repeat(before, lengths)


def unwrap32(values: np.ndarray, base: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Unwrap 32-bit sequence numbers within contiguous groups.

    values: raw uint32 values in arrival order; base: per-element origin (same group, same
    base); group: group id per element.  Returns int64 offsets from base.
    """
    rel = (values.astype(np.int64) - base.astype(np.int64)) % _W32
    st = _starts(group)
    d = np.empty(len(rel), np.int64)
    if len(rel):
        d[0] = rel[0]
        d[1:] = ((rel[1:] - rel[:-1] + (1 << 31)) % _W32) - (1 << 31)
        d[st] = np.where(rel[st] >= (1 << 31), rel[st] - _W32, rel[st])
    return _group_cumsum(d, st)


def _running_max_excl(v: np.ndarray, starts: np.ndarray, floor: int) -> np.ndarray:
    """Running maximum of the previous elements of each group (floor for the first)."""
    if not len(v):
        return v.copy()
    gi = np.cumsum(starts) - 1
    shifted = np.r_[floor, v[:-1]].astype(np.int64)
    shifted[starts] = floor
    span = int(np.max(np.abs(v))) + abs(floor) + 1
    lift = gi.astype(np.int64) * (2 * span + 1)
    m = np.maximum.accumulate(shifted + lift) - lift
    return m


def stable_order(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The stable sort order of integer pairs (a, b) (equal pairs keep their order).

    One stable argsort of a combined key when the ranges allow (fast on the nearly sorted
    keys of a capture: flows grouped, sequence numbers and times rising), else a lexsort
    with the index as last key.
    """
    if not len(a):
        return np.zeros(0, np.int64)
    a0, b0 = int(a.min()), int(b.min())
    ra, rb = int(a.max()) - a0 + 1, int(b.max()) - b0 + 1
    if ra * rb < (1 << 62):
        key = (a.astype(np.int64) - a0) * rb + (b.astype(np.int64) - b0)
        return np.argsort(key, kind="stable")
    return np.lexsort((np.arange(len(a)), b, a))


def pair_groups(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group equal integer (a, b) pairs with one sort instead of hashing.

    Returns (order, starts, gid): order sorts the pairs, starts are the positions in that
    order where a group begins, gid the group of each element (groups numbered in sorted
    pair order).
    """
    o = stable_order(a, b)
    if not len(o):
        z = np.zeros(0, np.int64)
        return z, z, z
    sa, sb = a[o], b[o]
    new = np.r_[True, (sa[1:] != sa[:-1]) | (sb[1:] != sb[:-1])]
    gid = np.empty(len(o), np.int64)
    gid[o] = np.cumsum(new) - 1
    return o, np.flatnonzero(new), gid


def duplicated_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """True where (a[i], b[i]) occurred at an earlier index (as DataFrame.duplicated)."""
    o, starts, gid = pair_groups(a, b)
    if not len(o):
        return np.zeros(0, bool)
    first = np.minimum.reduceat(o, starts)
    return np.arange(len(o)) != first[gid]


def reorder_analysis(group: np.ndarray, start: np.ndarray, end: np.ndarray,
                     tsval: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Classify segments (contiguous groups, arrival order) as new, retransmitted, reordered.

    group: group id; start/end: sequence range of each segment (int64); tsval: sender
    timestamps (0 = none) used to tell a late retransmission from network reordering.
    Returns boolean arrays ``retrans``, ``reordered`` and int array ``extent`` (0 if none).
    """
    n = len(group)
    st = _starts(group)
    nextexp = _running_max_excl(end, st, -(1 << 40))
    behind = start < nextexp
    dup = duplicated_pairs(np.asarray(group), np.asarray(start))
    late = np.zeros(n, bool)
    if tsval is not None:
        ts = tsval.astype(np.int64)
        has = ts > 0
        prev_ts = _running_max_excl(np.where(has, ts, -1), st, -1)
        late = has & (prev_ts >= 0) & (ts > prev_ts)
    retrans = behind & (dup | late)
    reordered = behind & ~retrans
    extent = np.zeros(n, np.int64)
    r = np.flatnonzero(reordered)
    if len(r):
        uniq = ~retrans
        pos = np.cumsum(uniq) - 1                      # arrival index among unique segments
        gi = np.cumsum(st) - 1
        u = np.flatnonzero(uniq)
        span = int(np.abs(start).max()) + 1
        lifted = np.maximum.accumulate(start[u] + gi[u] * (2 * span + 1))
        first_higher = np.searchsorted(lifted, start[r] + gi[r] * (2 * span + 1), "right")
        extent[r] = pos[r] - first_higher
    return {"retrans": retrans, "reordered": reordered, "extent": extent}


def segments(tbl: T.PacketTable, fl: Flows) -> pd.DataFrame:
    """Every TCP packet of tbl with unwrapped sequence and acknowledgement numbers.

    Columns: row, flow, dir, ts, seq (start, relative), end, payload, ack (relative to the
    other direction's origin), flags, tsval, plus for data segments retrans/reordered/extent.
    """
    c = tbl.cols
    rows = np.flatnonzero((fl.pkt_flow >= 0) & (c["proto"] == 6))
    f, d = fl.pkt_flow[rows], fl.pkt_dir[rows].astype(np.int64)
    order = np.argsort(f * 2 + d, kind="stable")  # by flow, direction, then row (ascending)
    rows, f, d = rows[order], f[order], d[order]
    flows = fl.flows
    isn = np.where(d == 0, flows["isn_fwd"].to_numpy(float)[f], flows["isn_rev"].to_numpy(float)[f])
    first = np.where(d == 0, flows["first_seq_fwd"].to_numpy(float)[f],
                     flows["first_seq_rev"].to_numpy(float)[f])
    has_isn = ~np.isnan(isn)
    base = np.where(has_isn, np.nan_to_num(isn) + 1, np.nan_to_num(first)).astype(np.int64) % _W32
    grp = f * 2 + d
    seq = unwrap32(c["seq"][rows], base, grp)
    # ACKs are relative to the other direction's origin
    other = np.where(d == 0, flows["isn_rev"].to_numpy(float)[f],
                     flows["isn_fwd"].to_numpy(float)[f])
    ofirst = np.where(d == 0, flows["first_seq_rev"].to_numpy(float)[f],
                      flows["first_seq_fwd"].to_numpy(float)[f])
    obase = np.where(~np.isnan(other), np.nan_to_num(other) + 1,
                     np.nan_to_num(ofirst)).astype(np.int64) % _W32
    ack = unwrap32(c["ack"][rows], obase, grp)
    payload = c["payload"][rows].astype(np.int64)
    df = pd.DataFrame({"row": rows, "flow": f, "dir": d, "ts": c["ts_ns"][rows], "seq": seq,
                       "end": seq + payload, "payload": payload, "ack": ack,
                       "flags": c["tcp_flags"][rows], "tsval": c["tsval"][rows]})
    data = df["payload"].to_numpy() > 0
    ra = reorder_analysis(grp[data], seq[data], seq[data] + payload[data],
                          c["tsval"][rows][data])
    for k, v in ra.items():
        col = np.zeros(len(df), v.dtype)
        col[data] = v
        df[k] = col
    # a SYN or FIN sent again (same direction, same sequence number) is a retransmission too
    ctl = ~data & ((df["flags"].to_numpy() & (T.SYN | T.FIN)) != 0)
    if ctl.any():
        sub = df.loc[ctl, ["flow", "dir", "seq", "flags"]].assign(
            flags=df.loc[ctl, "flags"] & (T.SYN | T.FIN))
        df.loc[ctl, "retrans"] = sub.duplicated().to_numpy()
    return df


def delivered_bytes(seg: pd.DataFrame, ddir: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, flow, bytes) per ACK from a flow's data receiver: the bytes it newly acknowledges.

    seg: `segments` (packets grouped by flow and direction, capture order inside); ddir:
    data direction per flow.  bytes is the advance of the cumulative acknowledgement beyond
    every earlier ACK of the flow and the flow's first data byte (relative 0: the ISN + 1,
    or the first data byte captured), 0 for duplicates and ACKs that go backwards, capped
    at the highest data byte seen so the FIN does not count.
    """
    f = seg["flow"].to_numpy()
    if not len(f):
        e = np.zeros(0, np.int64)
        return e, e, e
    data = seg["payload"].to_numpy() > 0
    fwd = seg["dir"].to_numpy() == ddir[f]
    top = np.full(len(ddir), -(1 << 62), np.int64)
    np.maximum.at(top, f[fwd & data], seg["end"].to_numpy(np.int64)[fwd & data])
    acks = np.flatnonzero(~fwd & ((seg["flags"].to_numpy() & T.ACK) != 0) & (top[f] > 0))
    if not len(acks):
        e = np.zeros(0, np.int64)
        return e, e, e
    fa = f[acks]
    ack = np.minimum(seg["ack"].to_numpy(np.int64)[acks], top[fa])
    st = _starts(fa)
    before = _running_max_excl(ack, st, 0)
    new = np.maximum(ack - before, 0)
    return seg["row"].to_numpy()[acks], fa, new


def data_direction(seg: pd.DataFrame, nflows: int) -> np.ndarray:
    """Per flow, the direction (0/1) that carried more payload."""
    key = seg["flow"].to_numpy() * 2 + seg["dir"].to_numpy()
    by = np.bincount(key, seg["payload"].to_numpy(), 2 * nflows).astype(np.int64)
    return (by[1::2] > by[0::2]).astype(np.int64)


def flow_table(tbl: T.PacketTable, fl: Flows, seg: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per flow with bytes, times, FCT, throughput, retransmissions, reordering, RTT.

    tbl: the capture; fl: its flows; seg: `segments(tbl, fl)` if already computed.
    """
    return flow_table_and_rtt(tbl, fl, seg)[0]


def flow_table_and_rtt(tbl: T.PacketTable, fl: Flows, seg: pd.DataFrame | None = None
                       ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`flow_table` and the `rtt_samples` it summarises (computed once for both)."""
    c = tbl.cols
    seg = segments(tbl, fl) if seg is None else seg
    flows = fl.flows.copy()
    nf = len(flows)
    out = flows[["proto", "src_addr", "sport", "dst_addr", "dport", "syn_seen", "mptcp_token",
                 "mptcp_role"]].copy()
    rows = np.flatnonzero(fl.pkt_flow >= 0)
    pf = fl.pkt_flow[rows]
    key = pf * 2 + fl.pkt_dir[rows]
    # per (flow, direction) by bincount: sums of integers stay exact below 2^53 bytes
    agg = {"frames": np.bincount(key, minlength=2 * nf),
           "frame_bytes": np.bincount(key, c["wirelen"][rows], 2 * nf).astype(np.int64),
           "payload": np.bincount(key, c["payload"][rows], 2 * nf).astype(np.int64)}
    for k, v in agg.items():
        for d, name in ((0, "fwd"), (1, "rev")):
            out[f"{k}_{name}"] = v[d::2].astype(np.int64)
    ts_p = c["ts_ns"][rows]
    first_ts = np.full(nf, np.iinfo(np.int64).max, np.int64)
    last_ts = np.full(nf, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(first_ts, pf, ts_p)
    np.maximum.at(last_ts, pf, ts_p)
    ddir = data_direction(seg, nf) if len(seg) else np.zeros(nf, np.int64)
    ddir = np.where(out["proto"].to_numpy() == "udp",
                    (out["payload_rev"] > out["payload_fwd"]).to_numpy(), ddir).astype(np.int64)
    out["data_dir"] = ddir
    syn_ts = seg[(seg["flags"] & T.SYN) != 0].groupby("flow")["ts"].min().reindex(range(nf))
    start = np.where(syn_ts.notna(), syn_ts.fillna(0).to_numpy(), first_ts).astype(np.int64)
    end = last_ts.astype(np.int64).copy()
    nbytes = np.where(ddir == 0, out["payload_fwd"], out["payload_rev"]).astype(np.int64)
    retr = np.zeros(nf, np.int64)
    data_retr = np.zeros(nf, np.int64)
    reord = np.zeros(nf, np.int64)
    ext_max = np.zeros(nf, np.int64)
    uniq = np.zeros(nf, np.int64)
    rtt_med = np.full(nf, np.nan)
    rtt = pd.DataFrame({"flow": [], "t": [], "rtt_ms": []})
    if len(seg):
        f = seg["flow"].to_numpy()
        sdir = seg["dir"].to_numpy()
        retrans = seg["retrans"].to_numpy(bool)
        dm = (sdir == ddir[f]) & (seg["payload"].to_numpy() > 0)
        fd = f[dm]
        has_data = np.bincount(fd, minlength=nf) > 0
        last_end = np.full(nf, np.iinfo(np.int64).min, np.int64)
        np.maximum.at(last_end, fd, seg["end"].to_numpy()[dm])
        first_seq = np.full(nf, np.iinfo(np.int64).max, np.int64)
        np.minimum.at(first_seq, fd, seg["seq"].to_numpy()[dm])
        span = _reindexed(last_end - first_seq, has_data)
        tcp = out["proto"].to_numpy() == "tcp"
        nbytes = np.where(tcp & ~np.isnan(span), np.nan_to_num(span), nbytes).astype(np.int64)
        retr = _count(f, retrans, nf)
        data_retr = _count(fd, retrans[dm], nf)
        reord = _count(fd, seg["reordered"].to_numpy(bool)[dm], nf)
        ext_max = np.zeros(nf, np.int64)  # extents are >= 0
        np.maximum.at(ext_max, fd, seg["extent"].to_numpy()[dm])
        uniq = _count(fd, ~retrans[dm], nf)
        am = (sdir != ddir[f]) & ((seg["flags"].to_numpy() & T.ACK) != 0)
        am &= has_data[f]
        am[am] = seg["ack"].to_numpy()[am] >= last_end[f[am]]
        covered = np.full(nf, np.iinfo(np.int64).max, np.int64)
        np.minimum.at(covered, f[am], seg["ts"].to_numpy()[am])
        cov = _reindexed(covered, np.bincount(f[am], minlength=nf) > 0)
        end = np.where(tcp & ~np.isnan(cov), np.nan_to_num(cov), end).astype(np.int64)
        rtt = rtt_samples(seg, ddir)
        if len(rtt):
            rtt_med = rtt.groupby("flow")["rtt_ms"].median().reindex(range(nf)).to_numpy()
    out["packets"] = out["frames_fwd"] + out["frames_rev"]
    out["bytes"] = nbytes
    out["start"] = start / 1e9
    out["end"] = end / 1e9
    fct = (end - start) / 1e9
    out["fct_s"] = np.where(out["proto"].to_numpy() == "tcp", fct, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["throughput_bps"] = np.where(fct > 0, nbytes * 8 / fct, np.nan)
        out["data_packets"] = uniq
        out["retransmissions"] = retr
        out["reordered_packets"] = reord
        out["reorder_ratio"] = np.where(uniq > 0, reord / np.maximum(uniq, 1), 0.0)
        out["reorder_extent_max"] = ext_max
        out["loss_estimate"] = np.where(uniq > 0, data_retr / np.maximum(uniq, 1), 0.0)
    out["rtt_ms_median"] = rtt_med
    return out, rtt


def _count(group: np.ndarray, flag: np.ndarray, n: int) -> np.ndarray:
    """Per group 0..n-1, how many elements have flag set (int64)."""
    return np.bincount(group[flag], minlength=n).astype(np.int64)


def _reindexed(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    """values as a per-flow aggregate reindexed by pandas would be: int64 when every flow is
    present, else float64 with NaN for the absent ones (so results round the same way)."""
    if present.all():
        return values
    return np.where(present, values, np.nan)


def rtt_samples(seg: pd.DataFrame, ddir: np.ndarray) -> pd.DataFrame:
    """RTT samples (ms) per flow: new segments never retransmitted, to the first covering ACK.

    seg: `segments()`; ddir: data direction per flow.  Columns: flow, t (s), rtt_ms.
    """
    f = seg["flow"].to_numpy()
    d = seg["dir"].to_numpy()
    fdir = ddir[f]
    dm = (d == fdir) & (seg["payload"].to_numpy() > 0)
    am = (d != fdir) & ((seg["flags"].to_numpy() & T.ACK) != 0)
    if not dm.any() or not am.any():
        return pd.DataFrame({"flow": [], "t": [], "rtt_ms": []})
    df_, dseq = f[dm], seg["seq"].to_numpy()[dm]
    o, starts, gid = pair_groups(df_, dseq)
    retx = np.logical_or.reduceat(seg["retrans"].to_numpy(bool)[dm][o], starts)[gid]
    c = np.flatnonzero(~retx & ~seg["reordered"].to_numpy(bool)[dm])
    c = c[~duplicated_pairs(df_[c], dseq[c])]
    cflow = df_[c]
    cend = seg["end"].to_numpy()[dm][c]
    cts = seg["ts"].to_numpy()[dm][c]
    aflow, aack, ats = f[am], seg["ack"].to_numpy()[am], seg["ts"].to_numpy()[am]
    span = int(max(np.abs(aack).max(), np.abs(cend).max() if len(c) else 0, 1)) + 1
    # per flow, running maximum of ACKs in time order; first ACK >= end after the send time
    ao = stable_order(aflow, ats)
    flow_ack, ts_ack = aflow[ao], ats[ao]
    lift = flow_ack.astype(np.int64) * (4 * span)
    run = np.maximum.accumulate(aack[ao] + lift)
    target = cend + cflow.astype(np.int64) * (4 * span)
    i = np.searchsorted(run, target, "left")
    ok = i < len(run)
    i = np.minimum(i, len(run) - 1)
    ok &= flow_ack[i] == cflow
    ok &= ts_ack[i] >= cts
    res = pd.DataFrame({"flow": cflow[ok], "t": cts[ok] / 1e9,
                        "rtt_ms": (ts_ack[i][ok] - cts[ok]) / 1e6})
    return res


def dsn_analysis(tbl: T.PacketTable, fl: Flows, seg: pd.DataFrame, ddir: np.ndarray
                 ) -> pd.DataFrame:
    """MPTCP data-level analysis of the data segments of every connection in this capture.

    Returns one row per data segment that can be mapped: token, flow, row, ts, dsn (relative to the
    connection's IDSN when its key was captured), end, reinjected, reordered, extent.
    """
    c = tbl.cols
    flows = fl.flows
    tok = flows["mptcp_token"].to_numpy()
    fdir = ddir[seg["flow"].to_numpy()]
    d = seg[(seg["dir"].to_numpy() == fdir) & (tok[seg["flow"].to_numpy()] != "")].copy()
    cols = ["token", "flow", "row", "ts", "dsn", "end", "reinjected", "reordered", "extent"]
    if not len(d):
        return pd.DataFrame({k: [] for k in cols})
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
    st = _starts(fl_)
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
        return pd.DataFrame({k: [] for k in cols})
    # subflow sequence offset: SSN is relative to the subflow ISN (first data byte = 1)
    syn = flows["syn_seen"].to_numpy()[d["flow"].to_numpy()]
    firstmap = d.groupby("flow")[["seq", "map_ssn"]].transform("first")
    k = np.where(syn, 1, (firstmap["map_ssn"] - firstmap["seq"]).to_numpy())
    raw = (d["map_dsn"].astype(np.uint64).to_numpy()
           + (d["seq"].to_numpy() + k - d["map_ssn"].to_numpy().astype(np.int64)).astype(np.uint64))
    d["token"] = tok[d["flow"].to_numpy()]
    d = d.assign(raw=raw).sort_values(["token", "row"], kind="stable")
    # relative DSN: to the IDSN when the key is known, else to the first DSN seen
    origin = {}
    for f in flows.index[flows["mptcp_role"] == "initial"]:
        key_col = "mptcp_key_fwd" if ddir[f] == 0 else "mptcp_key_rev"
        key = flows.loc[f, key_col]
        if pd.notna(key):
            origin[flows.loc[f, "mptcp_token"]] = key_token(int(key))[1] + 1
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
    gid = pd.factorize(tokens)[0]
    payload = d["payload"].to_numpy()
    ra = reorder_analysis(gid, rel, rel + payload)
    return pd.DataFrame({"token": tokens, "flow": d["flow"].to_numpy(), "row": d["row"].to_numpy(),
                         "ts": d["ts"].to_numpy(),
                         "dsn": rel, "end": rel + payload, "reinjected": ra["retrans"],
                         "reordered": ra["reordered"], "extent": ra["extent"]})


def connection_table(dsn: pd.DataFrame, flows: pd.DataFrame) -> pd.DataFrame:
    """One row per MPTCP connection: subflows, data bytes, data-level reordering."""
    cols = ["token", "subflows", "data_bytes", "start", "end", "data_packets", "reinjections",
            "dsn_reordered_packets", "dsn_reorder_ratio", "dsn_reorder_extent_max"]
    if not len(dsn):
        return pd.DataFrame({k: [] for k in cols})
    g = dsn.groupby("token")
    uniq = (~dsn["reinjected"]).groupby(dsn["token"]).sum()
    sub = flows[flows["mptcp_token"] != ""].groupby("mptcp_token").size()
    out = pd.DataFrame({
        "subflows": sub.reindex(g.size().index).fillna(0).astype(int),
        "data_bytes": g["end"].max() - g["dsn"].min(),
        "start": g["ts"].min() / 1e9, "end": g["ts"].max() / 1e9,
        "data_packets": uniq,
        "reinjections": g["reinjected"].sum(),
        "dsn_reordered_packets": g["reordered"].sum(),
        "dsn_reorder_ratio": g["reordered"].sum() / uniq.clip(lower=1),
        "dsn_reorder_extent_max": g["extent"].max()}).reset_index()
    return out[cols]


SERIES_COLUMNS = ["key", "t", "t_rel", "bin_s", "bytes", "rate_bps", "goodput_bps"]
MAX_SERIES_BINS = 1_000_000  # bins of one series (key): 1000 s of 1 ms bins, 27 h of 0.1 s


class SeriesLimitError(InputError):
    """A time series would need more than `MAX_SERIES_BINS` bins."""


def throughput_series(ts_ns: np.ndarray, nbytes: np.ndarray, keys: np.ndarray, bin_s: float,
                      t0: float, good: np.ndarray | None = None, source: str = "",
                      key_names: np.ndarray | None = None) -> pd.DataFrame:
    """Throughput and goodput per key per time bin.

    ts_ns: packet times; nbytes: payload bytes per packet; keys: series key per packet, or,
    with key_names, an integer index into key_names per packet (faster: no per-packet
    strings); bin_s: bin width (s); t0: time origin (s, epoch); good: bytes per packet that
    count as goodput (default: all; pass 0 for retransmissions); source: the capture, for
    messages.  Columns: key, t (bin start, epoch s), t_rel (s since t0), bin_s, bytes,
    rate_bps, goodput_bps; rows sorted by key, then time.  Bins between a key's first and
    last are present with 0, so one series holds at most `MAX_SERIES_BINS` bins: a longer one
    raises `SeriesLimitError` (memory stays bounded whatever the capture's timestamps say).
    """
    if not (np.isfinite(bin_s) and bin_s > 0):
        raise SeriesLimitError(f"time-series bin width {bin_s!r} s: expected a positive "
                               "number of seconds")
    if not len(ts_ns):
        return pd.DataFrame({k: [] for k in SERIES_COLUMNS})
    if key_names is None:
        codes, names = pd.factorize(keys)
    else:  # equal names are one series
        merged, names = pd.factorize(np.asarray(key_names, object))
        codes = merged[np.asarray(keys, np.int64)]
    names = np.asarray(names, object)
    by_name = np.argsort(names, kind="stable")
    rank = np.empty(len(names), np.int64)
    rank[by_name] = np.arange(len(names))
    lim = float(1 << 62)
    b = np.clip(np.floor((ts_ns / 1e9 - t0) / bin_s), -lim, lim).astype(np.int64)
    r = rank[codes]
    o = np.lexsort((b, r))
    rs, bs = r[o], b[o]
    first = np.flatnonzero(np.r_[True, (rs[1:] != rs[:-1]) | (bs[1:] != bs[:-1])])
    nb = np.asarray(nbytes)
    gbytes = np.add.reduceat(nb[o], first)
    ggood = gbytes if good is None else np.add.reduceat(np.asarray(good)[o], first)
    gk, gb = rs[first], bs[first]
    kfirst = np.flatnonzero(np.r_[True, gk[1:] != gk[:-1]])
    kmin = gb[kfirst]
    kmax = gb[np.r_[kfirst[1:], len(gb)] - 1]
    span = kmax - kmin + 1
    if span.max() > MAX_SERIES_BINS:
        k = int(np.argmax(span))
        key, n = names[by_name[gk[kfirst[k]]]], int(span[k])
        where = f"{source}: " if source else ""
        raise SeriesLimitError(
            f"{where}series {key!s} spans {n * bin_s:.6g} s, {n} bins of "
            f"{bin_s:g} s (limit {MAX_SERIES_BINS} bins); choose a coarser bin width or "
            "check the capture's timestamps")
    off = np.r_[0, np.cumsum(span)[:-1]]
    total = int(span.sum())
    kidx = np.repeat(np.arange(len(kfirst)), span)
    bins = kmin[kidx] + (np.arange(total) - off[kidx])
    gkey = np.cumsum(np.r_[True, gk[1:] != gk[:-1]]) - 1  # key index of each group
    at = off[gkey] + (gb - kmin[gkey])
    full_bytes = np.zeros(total, gbytes.dtype)
    full_bytes[at] = gbytes
    full_good = np.zeros(total, ggood.dtype)
    full_good[at] = ggood
    out = pd.DataFrame({"key": names[by_name[gk[kfirst]]][kidx], "bin": bins,
                        "bytes": full_bytes, "good": full_good})
    out["t_rel"] = out["bin"] * bin_s
    out["t"] = t0 + out["t_rel"]
    out["bin_s"] = float(bin_s)
    out["rate_bps"] = out["bytes"] * 8 / bin_s
    out["goodput_bps"] = out["good"] * 8 / bin_s
    return out[SERIES_COLUMNS]
