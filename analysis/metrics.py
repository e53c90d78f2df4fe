"""Per-flow metrics of one capture: sequence analysis, FCT, throughput, reordering, RTT.

The data level of MPTCP connections is in `analysis.dsn`, time series in `analysis.series`,
the grouped sequence arithmetic and RFC 4737 classification in `analysis.sequence`.

Definitions (all at the capture point of the table):

* A *data segment* is a TCP packet with payload.  Sequence numbers are unwrapped to 64 bits
  relative to the ISN (SYN seen) or to the first packet of the direction.
* A segment is *behind* when it starts below the highest byte seen so far in its flow
  direction (RFC 4737's NextExp).  A behind segment is a *retransmission* when its start
  was seen before, when earlier segments had carried every byte of it (a retransmission
  cut at other boundaries than the first transmission), or, with TCP timestamps, when its
  TSval is newer than every earlier segment's (it was sent later, so the network did not
  reorder it); otherwise it is *reordered*: it brings bytes never seen, late.
  Reordered-packet ratio = reordered / (unique segments), reordering extent of a
  reordered packet = its arrival index minus that of the first packet with a higher
  sequence number (RFC 4737 sections 4.1 and 4.2.1).  A flow's ``retransmissions`` also
  counts SYNs and FINs sent again, in both directions (as tshark does); its
  ``loss_estimate`` is data retransmissions / unique data segments.
* MPTCP data level: the same, on each packet's data sequence number (DSN of its DSS mapping
  plus its offset in the mapping) across all subflows of a connection, without the
  timestamp rule (each subflow has its own TSval clock); a segment whose data had been
  seen before, at the same DSN or cut otherwise (MPTCP maps data it sends again anew), is
  a reinjection or retransmission.
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
from analysis.flows import Flows
from analysis.sequence import (
    WRAP32,
    first_seen_bytes,
    group_starts,
    pair_groups,
    pair_keys,
    reorder_analysis,
    running_max_before,
    stable_order,
    unwrap32,
)


def segments(tbl: T.PacketTable, fl: Flows) -> pd.DataFrame:
    """Every TCP packet of tbl with unwrapped sequence and acknowledgement numbers.

    Columns: row, flow, dir, ts, seq (start, relative), end, payload, ack (relative to the
    other direction's origin), flags, tsval, plus for data segments retrans/reordered/extent
    and new_bytes (`first_seen_bytes`: bytes no earlier segment of the direction carried).
    """
    c = tbl.cols
    rows = np.flatnonzero((fl.pkt_flow >= 0) & (c["proto"] == 6))
    grp = fl.pkt_flow[rows] * 2
    grp += fl.pkt_dir[rows]
    order = _stable_argsort(grp)  # by flow, direction, then row (ascending)
    rows, grp = rows[order], grp[order]
    del order
    f, d = grp >> 1, grp & 1
    # per (flow, direction) origin: the ISN + 1 (SYN seen), else the first sequence number;
    # ACKs are relative to the other direction's origin
    origin = _origins(fl.flows)
    seq = unwrap32(c["seq"][rows], origin[grp], grp)
    ack = unwrap32(c["ack"][rows], origin[grp ^ 1], grp)
    payload = c["payload"][rows].astype(np.int64)
    df = pd.DataFrame({"row": rows, "flow": f, "dir": d, "ts": c["ts_ns"][rows], "seq": seq,
                       "end": seq + payload, "payload": payload, "ack": ack,
                       "flags": c["tcp_flags"][rows], "tsval": c["tsval"][rows]}, copy=False)
    data = df["payload"].to_numpy() > 0
    # bytes no earlier segment of the flow direction carried: what tells a retransmission
    # cut otherwise from reordering, and each segment's goodput (`CaptureAnalysis`)
    new = first_seen_bytes(grp[data], seq[data], seq[data] + payload[data])
    ra = reorder_analysis(grp[data], seq[data], seq[data] + payload[data],
                          c["tsval"][rows][data], new_bytes=new)
    ra["new_bytes"] = new.astype(np.int32)  # at most a segment's payload
    del new
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


def _stable_argsort(key: np.ndarray) -> np.ndarray:
    """Stable argsort of non-negative integer keys, narrowed to 16 bits when they fit (numpy
    sorts those by radix, in linear time)."""
    if len(key) and int(key.max()) < (1 << 16):
        key = key.astype(np.uint16)
    return np.argsort(key, kind="stable")


def _origins(flows: pd.DataFrame) -> np.ndarray:
    """Sequence origin per (flow, direction), index ``2 * flow + dir``, as int64 in
    [0, 2^32): the ISN + 1 where the SYN was seen, else the first sequence number."""
    out = np.zeros(2 * len(flows), np.int64)
    for d, name in ((0, "fwd"), (1, "rev")):
        isn = flows[f"isn_{name}"].to_numpy(float)
        first = flows[f"first_seq_{name}"].to_numpy(float)
        out[d::2] = np.where(~np.isnan(isn), np.nan_to_num(isn) + 1,
                             np.nan_to_num(first)).astype(np.int64) % WRAP32
    return out


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
    st = group_starts(fa)
    before = running_max_before(ack, st, 0)
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
    agg, first_ts, last_ts = _packet_aggregates(c, fl, nf)
    for k, v in agg.items():
        for d, name in ((0, "fwd"), (1, "rev")):
            out[f"{k}_{name}"] = v[d::2].astype(np.int64)
    ddir = data_direction(seg, nf) if len(seg) else np.zeros(nf, np.int64)
    ddir = np.where(out["proto"].to_numpy() == "udp",
                    (out["payload_rev"] > out["payload_fwd"]).to_numpy(), ddir).astype(np.int64)
    out["data_dir"] = ddir
    # RTT samples first: their temporaries are freed before the per-flow ones below
    rtt = rtt_samples(seg, ddir) if len(seg) else pd.DataFrame({"flow": [], "t": [],
                                                                "rtt_ms": []})
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
    cut_rate: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
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
        # cut off: a TCP flow with data whose last byte no captured ACK covers (an outage,
        # the run's end).  No FCT; its rate is what was acknowledged, up to the last ACK
        # that acknowledged new data (bytes sent but never acknowledged are not counted)
        # A capture that holds no ACK of the flow's data (one direction only, or only the
        # handshake back, e.g. a switch port on an asymmetric path) cannot tell: such a
        # flow keeps `end` = its last packet, as before
        cut = tcp & has_data & np.isnan(cov)
        if cut.any():
            acked, t_acked = _acknowledged(seg, f, sdir, ddir, has_data, first_seq, nf)
            cut &= acked > 0
            cut_rate = (cut, acked, t_acked)
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
        if cut_rate is not None:
            cut, acked, t_acked = cut_rate
            span_s = (t_acked - start) / 1e9
            out["fct_s"] = np.where(cut, np.nan, out["fct_s"])
            out["throughput_bps"] = np.where(
                cut, np.where(span_s > 0, acked * 8 / span_s, np.nan), out["throughput_bps"])
        out["data_packets"] = uniq
        out["retransmissions"] = retr
        out["reordered_packets"] = reord
        out["reorder_ratio"] = np.where(uniq > 0, reord / np.maximum(uniq, 1), np.nan)
        out["reorder_extent_max"] = ext_max
        out["loss_estimate"] = np.where(uniq > 0, data_retr / np.maximum(uniq, 1), np.nan)
    out["rtt_ms_median"] = rtt_med
    return out, rtt


def _packet_aggregates(c: dict[str, np.ndarray], fl: Flows, nf: int
                       ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Per (flow, direction) frames, frame bytes and payload (index ``2 * flow + dir``),
    and per flow the first and last packet time (ns)."""
    rows = np.flatnonzero(fl.pkt_flow >= 0)
    pf = fl.pkt_flow[rows]
    key = pf * 2 + fl.pkt_dir[rows]
    # per (flow, direction) by bincount: sums of integers stay exact below 2^53 bytes
    agg = {"frames": np.bincount(key, minlength=2 * nf),
           "frame_bytes": np.bincount(key, c["wirelen"][rows], 2 * nf).astype(np.int64),
           "payload": np.bincount(key, c["payload"][rows], 2 * nf).astype(np.int64)}
    del key
    ts_p = c["ts_ns"][rows]
    first_ts = np.full(nf, np.iinfo(np.int64).max, np.int64)
    last_ts = np.full(nf, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(first_ts, pf, ts_p)
    np.maximum.at(last_ts, pf, ts_p)
    return agg, first_ts, last_ts


def _count(group: np.ndarray, flag: np.ndarray, n: int) -> np.ndarray:
    """Per group 0..n-1, how many elements have flag set (int64)."""
    return np.bincount(group[flag], minlength=n).astype(np.int64)


def _acknowledged(seg: pd.DataFrame, f: np.ndarray, sdir: np.ndarray, ddir: np.ndarray,
                  has_data: np.ndarray, first_seq: np.ndarray, nf: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per flow, the data bytes its receiver acknowledged (highest ACK - first data byte,
    0 without one) and when the first ACK that high was captured (ns; NaN without)."""
    am = (sdir != ddir[f]) & ((seg["flags"].to_numpy() & T.ACK) != 0) & has_data[f]
    ack = seg["ack"].to_numpy()[am]
    fa = f[am]
    top = np.full(nf, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(top, fa, ack)
    at_top = ack == top[fa]
    when = np.full(nf, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(when, fa[at_top], seg["ts"].to_numpy()[am][at_top])
    seen = np.bincount(fa, minlength=nf) > 0
    acked = np.where(seen & has_data, np.maximum(top - first_seq, 0), 0)
    return acked, np.where(seen, when, np.nan)


def _reindexed(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    """values as a per-flow aggregate reindexed by pandas would be: int64 when every flow is
    present, else float64 with NaN for the absent ones (so results round the same way)."""
    if present.all():
        return values
    return np.where(present, values, np.nan)


def _abs_max(v: np.ndarray) -> int:
    """max(|v|) as a Python int (0 for an empty array), without an |v| temporary."""
    return max(abs(int(v.min())), abs(int(v.max()))) if len(v) else 0


def _sent_again(flow: np.ndarray, seq: np.ndarray, retrans: np.ndarray) -> np.ndarray:
    """True for every data segment whose (flow, start) some retransmission also has."""
    if not retrans.any():
        return np.zeros(len(flow), bool)
    key = pair_keys(flow, seq)
    if key is None:
        o, starts, gid = pair_groups(flow, seq)
        return np.logical_or.reduceat(retrans[o], starts)[gid]
    return pd.Series(key, copy=False).isin(key[retrans]).to_numpy()


def rtt_samples(seg: pd.DataFrame, ddir: np.ndarray) -> pd.DataFrame:
    """RTT samples (ms) per flow: new segments never retransmitted, to the first covering ACK.

    seg: `segments()`; ddir: data direction per flow.  Columns: flow, t (s), rtt_ms.
    """
    f = seg["flow"].to_numpy()
    d = seg["dir"].to_numpy()
    fdir = ddir[f]
    dm = d == fdir
    dm &= seg["payload"].to_numpy() > 0
    am = d != fdir
    am &= (seg["flags"].to_numpy() & T.ACK) != 0
    del fdir
    if not dm.any() or not am.any():
        return pd.DataFrame({"flow": [], "t": [], "rtt_ms": []})
    df_, dseq = f[dm], seg["seq"].to_numpy()[dm]
    retx = _sent_again(df_, dseq, seg["retrans"].to_numpy(bool)[dm])
    # No (flow, start) is left twice: a second segment with a start seen before is behind
    # the first one's end, so `reorder_analysis` made it a retransmission, and retx drops
    # every segment of a start that any retransmission has.
    retx = retx | seg["reordered"].to_numpy(bool)[dm]
    dsel = np.flatnonzero(dm)[~retx]
    del retx, df_, dseq, dm
    cflow = f[dsel]
    cend = seg["end"].to_numpy()[dsel]
    cts = seg["ts"].to_numpy()[dsel]
    del dsel
    aflow, aack, ats = f[am], seg["ack"].to_numpy()[am], seg["ts"].to_numpy()[am]
    del am
    span = max(_abs_max(aack), _abs_max(cend), 1) + 1
    # per flow, running maximum of ACKs in time order; first ACK >= end after the send time
    ao = stable_order(aflow, ats)
    if (ao[1:] < ao[:-1]).any():  # ACKs of a capture are mostly in order already
        aflow, aack, ats = aflow[ao], aack[ao], ats[ao]
    del ao
    flow_ack, ts_ack = aflow, ats
    run = flow_ack.astype(np.int64) * (4 * span)
    run += aack
    del aack
    np.maximum.accumulate(run, out=run)
    target = cflow.astype(np.int64) * (4 * span)
    target += cend
    del cend
    i = np.searchsorted(run, target, "left")
    del target
    ok = i < len(run)
    np.minimum(i, len(run) - 1, out=i)
    del run
    ok &= flow_ack[i] == cflow
    ok &= ts_ack[i] >= cts
    res = pd.DataFrame({"flow": cflow[ok], "t": cts[ok] / 1e9,
                        "rtt_ms": (ts_ack[i][ok] - cts[ok]) / 1e6})
    return res
