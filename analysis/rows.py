"""What each row of ``metrics/flows.parquet`` is, which path it took and which workload made it.

* ``kind``: ``flow`` (a TCP or UDP flow), ``subflow`` (one subflow of an MPTCP connection)
  or ``connection`` (an MPTCP connection at the data level) -- the same words as the
  ``kind`` of ``metrics/timeseries.parquet``, whose ``key`` is the row's ``flow_id``.  One
  transfer is one ``flow`` or one ``connection`` row: ``WHERE kind != 'subflow'``.
* ``path``: the multipath path of a flow or subflow, from ``metadata.json``'s interfaces map
  (each host interface's ``path`` and ``addr``, recorded by the run from its addressing
  plan): the path of the interface holding ``src_addr``, else of ``dst_addr``; null for a
  connection (its subflows say) and where no interface is on a path (fat tree: the
  switches choose the route per flow or per packet and the testbed does not record it).
* ``workload`` and ``app_elapsed_s``: joined from ``samples/flows.jsonl`` by 4-tuple (the
  flow tool records a connection's first subflow); a connection and every subflow of it
  carry the workload of whichever of its rows matched; ``app_elapsed_s`` only on the
  transfer's own row (``flow`` or ``connection``).
* ``fct_s`` is cleared (null) on every row of a transfer the flow tool ran without a size
  (until the run's end or for a duration): it would say when the senders were stopped,
  not when a transfer completed (`unsized_transfers` tells them, with when each sender
  was stopped; `analysis.bundle` gives them their rate while they sent).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

FLOW, SUBFLOW, CONNECTION = "flow", "subflow", "connection"
KEY = ["src_addr", "sport", "dst_addr", "dport"]


def path_of_address(meta: dict) -> dict[str, str]:
    """Address -> path name of every host interface metadata.json puts on a path.

    meta: metadata.json; its ``interfaces`` map is ``{intf: {host, path, addr}}``.
    """
    out: dict[str, str] = {}
    for info in (meta.get("interfaces") or {}).values():
        if isinstance(info, dict) and info.get("path") and info.get("addr"):
            out[str(info["addr"]).split("/")[0]] = str(info["path"])
    return out


def row_kind(protocol: pd.Series) -> np.ndarray:
    """``kind`` from ``protocol`` (``tcp``/``udp`` -> flow, ``mptcp-subflow``, ``mptcp``)."""
    p = protocol.to_numpy()
    return np.where(p == "mptcp", CONNECTION, np.where(p == "mptcp-subflow", SUBFLOW, FLOW))


def row_paths(flows: pd.DataFrame, meta: dict) -> np.ndarray:
    """The ``path`` of every row of flows (None where unknown or for a connection)."""
    by_addr = path_of_address(meta)
    src = flows["src_addr"].map(by_addr)
    dst = flows["dst_addr"].map(by_addr)
    path = src.where(src.notna(), dst)
    path = path.where(flows["kind"] != CONNECTION)
    return path.astype(object).where(path.notna(), None).to_numpy()


def _records(flows: pd.DataFrame, app: pd.DataFrame) -> tuple[pd.DataFrame, pd.MultiIndex]:
    """The flow tool's records indexed by 4-tuple, and each row of flows' 4-tuple."""
    a = app.dropna(subset=["sport", "dport"]).copy()
    a["sport"], a["dport"] = a["sport"].astype(int), a["dport"].astype(int)
    a = a.drop_duplicates(KEY).set_index(KEY)
    return a, pd.MultiIndex.from_frame(flows[KEY].astype({"sport": int, "dport": int}))


def join_workloads(flows: pd.DataFrame, app: pd.DataFrame) -> pd.DataFrame:
    """flows with ``workload`` and ``app_elapsed_s`` from the flow tool's records.

    flows: rows with kind, parent, flow_id and the 4-tuple; app: samples/flows.jsonl as
    `analysis.samples.read_jsonl` gives it (workload, fct_s, 4-tuple).
    """
    flows = flows.assign(workload=None, app_elapsed_s=np.nan)
    if not len(app) or not len(flows):
        return flows
    a, idx = _records(flows, app)
    matched = a["workload"].reindex(idx).to_numpy()
    elapsed = pd.to_numeric(a["fct_s"].reindex(idx), errors="coerce").to_numpy()
    # a connection: the workload any of its rows matched, for all of them
    kind = flows["kind"].to_numpy()
    in_conn = kind != FLOW
    conn_id = np.where(kind == CONNECTION, flows["flow_id"], flows["parent"])
    found = pd.Series(matched[in_conn], index=conn_id[in_conn]).dropna()
    found = found[~found.index.duplicated()]
    inherited = pd.Series(conn_id).map(found).to_numpy()
    flows["workload"] = np.where(in_conn, inherited, matched)
    flows["workload"] = flows["workload"].astype(object).where(flows["workload"].notna(), None)
    # the application's time belongs to the transfer: the flow row or the connection row
    conn_elapsed = pd.Series(elapsed[in_conn], index=conn_id[in_conn]).dropna()
    conn_elapsed = conn_elapsed[~conn_elapsed.index.duplicated()]
    flows["app_elapsed_s"] = np.where(kind == FLOW, elapsed,
                                      np.where(kind == CONNECTION,
                                               pd.Series(conn_id).map(conn_elapsed).to_numpy(),
                                               np.nan)).astype(float)
    # a transfer the flow tool ran without a size (until the run's end, or for a duration)
    # has no completion time: its fct_s would only say when the senders were stopped
    unsized, _duration = unsized_transfers(flows, app)
    flows["fct_s"] = flows["fct_s"].where(~unsized)
    return flows


def unsized_transfers(flows: pd.DataFrame, app: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row of flows: whether its transfer (the flow, or the connection with all its
    subflows) is one the flow tool ran without a size, and for how long it was to send
    (``duration_s`` of its record; NaN: until the run's end, or no record matched).

    flows: rows with kind, parent, flow_id and the 4-tuple; app: samples/flows.jsonl.
    """
    n = len(flows)
    if not len(app) or not n:
        return np.zeros(n, bool), np.full(n, np.nan)
    a, idx = _records(flows, app)
    kind = flows["kind"].to_numpy()
    in_conn = kind != FLOW
    conn_id = pd.Series(np.where(kind == CONNECTION, flows["flow_id"], flows["parent"]))
    no_size = pd.to_numeric(a["size_bytes"], errors="coerce").isna()  # of the recorded
    unsized = no_size.reindex(idx).astype("boolean").fillna(False).to_numpy(bool)
    dur = pd.to_numeric(a["duration_s"], errors="coerce") if "duration_s" in a \
        else pd.Series(np.nan, index=a.index)
    duration = dur.reindex(idx).to_numpy(float)
    # a connection's record matches one of its rows: all of them share it
    c_unsized = pd.Series(unsized[in_conn], index=conn_id[in_conn].to_numpy())
    c_unsized = c_unsized[c_unsized].index.unique()
    unsized = np.where(in_conn, conn_id.isin(c_unsized).to_numpy(), unsized)
    c_dur = pd.Series(duration[in_conn], index=conn_id[in_conn].to_numpy()).dropna()
    c_dur = c_dur[~c_dur.index.duplicated()]
    duration = np.where(in_conn, conn_id.map(c_dur).to_numpy(float), duration)
    return unsized, duration


def label_rows(flows: pd.DataFrame, meta: dict, app: pd.DataFrame) -> pd.DataFrame:
    """flows with ``kind``, ``path``, ``workload`` and ``app_elapsed_s`` filled in."""
    flows = flows.assign(kind=row_kind(flows["protocol"]))
    flows["path"] = row_paths(flows, meta)
    return join_workloads(flows, app)
