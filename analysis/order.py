"""Out of order against the sender's own order: the paper-style out-of-order share.

A data segment is *out of order* when it reaches the receiver after a segment that the
sender sent later.  Only segments the sender's capture shows exactly once count (a
retransmission is not a reordering, and a segment sent twice has no single send time);
the share is over those segments that the receiver's capture shows.  This needs both
captures of a flow, the sender's and the receiver's, and it is the figure P1 (and
issue 16's fidelity check) mean by "packets delivered out of order".

It is kept beside the RFC 4737 metric (`analysis.sequence.reorder_analysis`:
``reordered_packets``, ``reorder_ratio``), which reads the receiver's capture alone and
must tell retransmissions from reordering by TCP timestamps; on links of a few
microseconds a fast retransmission carries the same millisecond timestamp as the
segments around it and counts as reordered there.

Segments are matched between the two captures by their raw 32-bit sequence number and
payload length (with offloads off, one skb is one packet at both ends).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

ORDER_COLUMNS = ["ooo_packets", "ooo_ratio"]


def segment_keys(seq32: np.ndarray, payload: np.ndarray) -> np.ndarray:
    """One int64 key per data segment: raw sequence number and payload length."""
    return seq32.astype(np.int64) * 65536 + payload.astype(np.int64)


def late_arrivals(sent: np.ndarray, received: np.ndarray) -> tuple[int, int]:
    """(counted, late) for one flow direction.

    sent: segment keys in the sender capture's order; received: keys in the receiver
    capture's order.  counted: received segments the sender sent exactly once; late:
    those that arrived after a segment sent later than them.
    """
    if not len(sent) or not len(received):
        return 0, 0
    keys, first, counts = np.unique(sent, return_index=True, return_counts=True)
    once = counts == 1
    keys, send_idx = keys[once], first[once]
    if not len(keys):
        return 0, 0
    pos = np.minimum(np.searchsorted(keys, received), len(keys) - 1)
    known = keys[pos] == received
    idx = send_idx[pos[known]]
    # a duplicate arrival of a segment sent once (none in an emulated network) counts once
    idx = idx[~pd.Series(idx).duplicated().to_numpy()]
    if not len(idx):
        return 0, 0
    prev_max = np.maximum.accumulate(np.concatenate([[-1], idx[:-1]]))
    return len(idx), int((idx < prev_max).sum())


def ooo_table(pairs: list[tuple[str, np.ndarray, np.ndarray]]) -> pd.DataFrame:
    """One row per flow: flow_id, ooo_packets, ooo_ratio, ooo_counted.

    pairs: (flow_id, keys at the sender, keys at the receiver) per flow.
    """
    rows = []
    for fid, sent, received in pairs:
        counted, late = late_arrivals(sent, received)
        rows.append({"flow_id": fid, "ooo_packets": late if counted else np.nan,
                     "ooo_ratio": late / counted if counted else np.nan,
                     "ooo_counted": counted})
    return pd.DataFrame(rows, columns=["flow_id", "ooo_packets", "ooo_ratio", "ooo_counted"])


def flow_keys(seg: pd.DataFrame, seq32: np.ndarray, flow: int, data_dir: int) -> np.ndarray:
    """Keys of one flow's data segments in capture order.

    seg: `analysis.metrics.segments` of a capture (``row`` indexes the capture's packets);
    seq32: the capture's raw sequence numbers; flow, data_dir: the flow's index and data
    direction in that capture.
    """
    f = seg["flow"].to_numpy()
    pick = (f == flow) & (seg["dir"].to_numpy() == data_dir) & (seg["payload"].to_numpy() > 0)
    rows = seg["row"].to_numpy()[pick]
    order = np.argsort(rows, kind="stable")   # capture order
    return segment_keys(seq32[rows[order]], seg["payload"].to_numpy()[pick][order])


def between_captures(sender: Any, receiver: Any) -> dict[str, tuple[int, int]]:
    """(counted, late) of every TCP flow whose data the sender's capture shows leaving
    and the receiver's capture shows arriving.

    sender, receiver: `analysis.capture.CaptureAnalysis` of a capture at the data
    sender's interface and one at the data receiver's.  A flow counts when both
    captures hold it and it carried data in the same direction in both.
    """
    out: dict[str, tuple[int, int]] = {}
    rrows = receiver.flow_rows
    rindex = {fid: i for i, fid in enumerate(rrows["flow_id"])}
    srows = sender.flow_rows
    for i, fid in enumerate(srows["flow_id"]):
        j = rindex.get(fid)
        if j is None or srows["proto"].iat[i] != "tcp":
            continue
        d = int(srows["data_dir"].iat[i])
        if int(rrows["data_dir"].iat[j]) != d:
            continue
        if _first_data_ts(sender.segments, i, d) > _first_data_ts(receiver.segments, j, d):
            continue  # the "sender" capture is this flow's receiving end
        sent = flow_keys(sender.segments, sender.table.cols["seq"], i, d)
        got = flow_keys(receiver.segments, receiver.table.cols["seq"], j, d)
        if len(sent):
            out[fid] = late_arrivals(sent, got)
    return out


def _first_data_ts(seg: pd.DataFrame, flow: int, data_dir: int) -> float:
    pick = (seg["flow"].to_numpy() == flow) & (seg["dir"].to_numpy() == data_dir) \
        & (seg["payload"].to_numpy() > 0)
    ts = seg["ts"].to_numpy()[pick]
    return float(ts.min()) if len(ts) else float("inf")
