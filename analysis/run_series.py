"""``metrics/timeseries.parquet`` of a run: one series per flow, subflow, connection,
interface and path, on the run's clock.

Bin k covers ``[t0 + k * bin_s, t0 + (k + 1) * bin_s)`` (``t0``: metadata.json, when the
network was ready), k >= 0: packets before t0 are in no series (`analysis.series`).  A
flow's or subflow's series is counted at the capture its ``flows`` row comes from (the data
sender's), so its goodput bins add up to the data bytes of that row (goodput: the bytes
each segment carries that no earlier segment of the flow did, `CaptureAnalysis.goodput_bytes`).
An MPTCP connection's series is counted where its ``flows`` row is, at the data receiver's
captures, one row per bin (``capture`` names every capture it was counted at): its
``bytes`` are its subflows' payload arriving there, its goodput the data-level bytes seen
for the first time across all of them (by data sequence number, `analysis.dsn`), so
reinjections count once, data the sender assigned but nobody saw arrive is not counted, and
its goodput bins add up to the connection row's ``bytes``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.capture import CaptureAnalysis
from analysis.sequence import first_seen_bytes
from analysis.series import throughput_series
from testbed.results import columns as C

TIMESERIES_COLUMNS = C.names("timeseries")


def run_timeseries(caps: list[CaptureAnalysis], base: pd.DataFrame,
                   path_of: dict[str, str | None], t0: float, bin_s: float,
                   conn_at: dict[str, list[str]]) -> pd.DataFrame:
    """The timeseries table of a run.

    caps: the analysed captures; base: the flow and subflow rows (flow_id, capture,
    capture_receiver, parent); path_of: capture stem -> the path of its interface (from
    metadata.json's interfaces map); t0: the run's time origin (epoch s);
    bin_s: bin width (s); conn_at: MPTCP connection (``mptcp:<token>``) -> the captures
    its ``flows`` row was counted at (the data receiver's).
    """
    parts = []
    chosen = dict(zip(base["flow_id"], base["capture"], strict=True))
    receiver = dict(zip(base["flow_id"], base["capture_receiver"], strict=True))
    parent = dict(zip(base["flow_id"], base["parent"], strict=True))
    seen_paths: set[str] = set()
    conn_ts, conn_bytes, conn_key = [], [], []
    conn_dsn = []  # the data-level segments of the subflows counted at each capture
    conn_caps: dict[str, list[str]] = {}  # connection -> the captures it is counted at
    for c in caps:
        src = c.table.path
        ts = c.table.cols["ts_ns"]
        good = c.goodput_bytes()
        path = path_of.get(c.name)
        keys = [("iface", c.name)]
        if path and path not in seen_paths:  # one capture per path: the first by name
            seen_paths.add(path)
            keys.append(("path", path))
        # first, while nothing else per packet is held; added after the flows' series
        iface_parts = _iface_series(c, good, keys, bin_s, t0)
        # per flow (not per packet): which series its packets go to
        fid = c.flow_rows["flow_id"].to_numpy()
        f_mine = np.array([chosen.get(i) == c.name for i in fid], bool)
        f_par = np.array([parent.get(i) or "" for i in fid], object)
        f_rx = np.array([receiver.get(i) == c.name and not parent.get(i) for i in fid], bool)
        f_conn = np.array([c.name in conn_at.get(p, ()) for p in f_par], bool)
        rows, flow, payload = c.data_bytes_per_packet()
        at_conn = f_conn[flow]  # subflow packets counted for their connection here
        conn_rows, conn_flow, conn_payload = rows[at_conn], flow[at_conn], payload[at_conn]
        rows, flow, payload = _where(f_mine[flow], rows, flow, payload)
        sub = f_par[flow] != ""
        for kind, s in (("flow", ~sub), ("subflow", sub)):
            if s.any():
                r, fl, pl = _where(s, rows, flow, payload)
                parts.append(throughput_series(ts[r], pl, fl, bin_s, t0, good[r], src,
                                               key_names=fid)
                             .assign(kind=kind, capture=c.name))
                del r, fl, pl
        del rows, flow, payload, sub, good
        # top-level TCP flows: bytes delivered in order, from the receiver's ACKs
        rrows, rflow, rbytes = c.delivered_bytes_per_packet()
        at_rx = f_rx[rflow]
        if at_rx.any():
            rrows, rflow, rbytes = _where(at_rx, rrows, rflow, rbytes)
            parts.append(throughput_series(ts[rrows], rbytes, rflow, bin_s, t0, source=src,
                                           key_names=fid)
                         .assign(kind="delivered", capture=c.name))
        if at_conn.any():  # connections: their subflows' packets at this capture
            conn_ts.append(ts[conn_rows])
            conn_bytes.append(conn_payload)
            conn_key.append(f_par[conn_flow])
            for k in set(conn_key[-1]):
                conn_caps.setdefault(k, []).append(c.name)
            dflow = c.dsn["flow"].to_numpy().astype(np.int64)
            at = f_conn[dflow]
            conn_dsn.append(pd.DataFrame({"key": f_par[dflow[at]],
                                          "ts": c.dsn["ts"].to_numpy()[at],
                                          "dsn": c.dsn["dsn"].to_numpy()[at],
                                          "end": c.dsn["end"].to_numpy()[at]}))
        parts += iface_parts
    if conn_ts:
        d = pd.concat(conn_dsn, ignore_index=True).sort_values(["key", "ts"], kind="stable")
        new = first_seen_bytes(d["key"].to_numpy(), d["dsn"].to_numpy(), d["end"].to_numpy())
        nbytes = np.concatenate(conn_bytes)
        zeros = np.zeros(len(nbytes), np.int64)
        # payload from the subflows' packets, goodput from their data-level segments
        conn = throughput_series(np.concatenate([*conn_ts, d["ts"].to_numpy()]),
                                 np.concatenate([nbytes, np.zeros(len(d), np.int64)]),
                                 np.concatenate([*conn_key, d["key"].to_numpy()]), bin_s, t0,
                                 np.concatenate([zeros, new]), "MPTCP connections")
        where = {k: ",".join(sorted(v)) for k, v in conn_caps.items()}
        parts.append(conn.assign(kind="connection", capture=conn["key"].map(where)))
    if not parts:
        return pd.DataFrame({k: [] for k in TIMESERIES_COLUMNS})
    return pd.concat(parts, ignore_index=True)[TIMESERIES_COLUMNS]


def _where(mask: np.ndarray, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """arrays[mask] each, or the arrays themselves (no copies) when mask holds everywhere."""
    if mask.all():
        return arrays
    return tuple(a[mask] for a in arrays)


def _iface_series(c: CaptureAnalysis, good: np.ndarray, keys: list[tuple[str, str]],
                  bin_s: float, t0: float) -> list[pd.DataFrame]:
    """The capture's interface series, and its path's when keys name one: every IP packet's
    payload (goodput: `CaptureAnalysis.goodput_bytes`).  The path's bins are the
    interface's under the path's name."""
    ts = c.table.cols["ts_ns"]
    ip_any = c.table.cols["ip_ver"] > 0
    sel = slice(None) if ip_any.all() else np.flatnonzero(ip_any)
    del ip_any
    payload = c.table.cols["payload"][sel].astype(np.int64)
    one_key = np.broadcast_to(np.int64(0), len(payload))  # no per-packet array
    series = throughput_series(ts[sel], payload, one_key, bin_s, t0, good[sel], c.table.path,
                               key_names=np.array([c.name], object))
    return [series.assign(key=np.array([key] * len(series), object) if len(series)
                          else series["key"], kind=kind, capture=c.name)
            for kind, key in keys]
