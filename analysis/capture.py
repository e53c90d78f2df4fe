"""Everything analysis derives from one capture file, computed once."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from analysis import metrics as M
from analysis.dsn import connection_table, dsn_analysis, key_origins
from analysis.flows import Flows, find_flows
from analysis.pcap import DEFAULT_CHUNK_BYTES, Progress, read_packets
from analysis.table import PacketTable

FLOW_ID_COLUMNS = ["proto", "src_addr", "sport", "dst_addr", "dport"]
_TEXT_DTYPE = pd.Series(["x"]).dtype  # what pandas makes of a list of strings
# the packet columns the analysis reads (flows, sequence analysis, MPTCP data level, series)
ANALYSIS_COLUMNS = ("ts_ns", "wirelen", "ip_ver", "proto", "src", "dst", "sport", "dport",
                    "payload", "tcp_flags", "seq", "ack", "tsval", "mp_subtypes", "dss_flags",
                    "dsn", "ssn")


def flow_ids(flows: pd.DataFrame) -> pd.Series:
    """Stable text id of each flow: ``tcp:SRC:SPORT>DST:DPORT`` (initiator first), with
    ``#2``, ``#3``... for later connections that reuse the same 4-tuple (by start time)."""
    base = (flows["proto"] + ":" + flows["src_addr"] + ":" + flows["sport"].astype(str) + ">"
            + flows["dst_addr"] + ":" + flows["dport"].astype(str))
    nth = flows.assign(_b=base).sort_values("start", kind="stable").groupby("_b").cumcount()
    nth = nth.reindex(flows.index)
    return base.where(nth == 0, base + "#" + (nth + 1).astype(str))


def text_column(codes: np.ndarray, names: np.ndarray
                ) -> np.ndarray | pd.api.extensions.ExtensionArray:
    """``names[codes]`` as pandas' default text column, built by Arrow from a dictionary
    (one string per name, not one Python string per row)."""
    if not isinstance(_TEXT_DTYPE, pd.StringDtype):  # pandas < 3: object columns
        return names[codes]
    labels = pa.array([str(x) for x in names], pa.large_string())
    arr = pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32), pa.int32()), labels)
    return pd.array(arr.cast(pa.large_string()), dtype=_TEXT_DTYPE)


@dataclass
class CaptureAnalysis:
    """One capture's packets, flows, per-flow metrics and MPTCP data-level analysis.

    name: capture name (file stem); table, flows: decoded packets and flow assignment;
    segments: per-TCP-packet sequence analysis; flow_rows: `metrics.flow_table`;
    dsn: `dsn.dsn_analysis`; connections: `dsn.connection_table`.
    """

    name: str
    table: PacketTable
    flows: Flows
    segments: pd.DataFrame
    flow_rows: pd.DataFrame
    dsn: pd.DataFrame
    connections: pd.DataFrame
    rtt_samples: pd.DataFrame | None = None  # `metrics.rtt_samples`, kept from flow_table

    @classmethod
    def of(cls, path: str | os.PathLike, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
           progress: Progress | None = None, all_columns: bool = True) -> CaptureAnalysis:
        """Read and analyse the capture at path (chunk_bytes: read-buffer size; progress:
        called with (path, bytes read, file size) while reading, see `analysis.pcap`;
        all_columns: keep every packet column in ``table``, else only `ANALYSIS_COLUMNS`)."""
        tbl = read_packets(path, chunk_bytes, progress,
                           None if all_columns else ANALYSIS_COLUMNS)
        fl = find_flows(tbl)
        seg = M.segments(tbl, fl)
        rows, rtt = M.flow_table_and_rtt(tbl, fl, seg)
        ddir = rows["data_dir"].to_numpy().astype(np.int64)
        dsn = dsn_analysis(tbl, fl, seg, ddir)
        conns = connection_table(dsn, fl.flows)
        rows.insert(0, "flow_id", flow_ids(rows).to_numpy())
        rows.insert(1, "capture", Path(path).stem)
        return cls(Path(path).stem, tbl, fl, seg, rows, dsn, conns, rtt)

    def data_bytes_per_packet(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row, flow, payload) of the packets in each flow's data direction."""
        c = self.table.cols
        ddir = self.flow_rows["data_dir"].to_numpy()
        f = self.flows.pkt_flow
        sel = np.flatnonzero(f >= 0)
        sel = sel[self.flows.pkt_dir[sel] == ddir[f[sel]]]
        return sel, f[sel], c["payload"][sel].astype(np.int64)

    def delivered_bytes_per_packet(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row, flow, bytes) of the data receivers' ACKs: bytes newly acknowledged."""
        ddir = self.flow_rows["data_dir"].to_numpy().astype(np.int64)
        return M.delivered_bytes(self.segments, ddir)

    def goodput_bytes(self) -> np.ndarray:
        """Per packet row, the payload bytes seen for the first time at this capture: of a
        TCP segment, the bytes no earlier segment of its flow direction carried
        (`analysis.sequence.first_seen_bytes` on the unwrapped sequence numbers), so a
        flow's add up to its sequence span; all of a UDP packet's payload."""
        good = self.table.cols["payload"].astype(np.int64)
        seg = self.segments
        data = seg["payload"].to_numpy() > 0
        good[seg["row"].to_numpy()[data]] = seg["new_bytes"].to_numpy()[data]  # `M.segments`
        return good

    def dsn_origins(self) -> dict[str, int]:
        """`analysis.dsn.key_origins` of the connections whose key this capture holds."""
        return key_origins(self.flows.flows, self.flow_rows["data_dir"].to_numpy())

    def align_dsn(self, origins: dict[str, int]) -> None:
        """Redo the data-level analysis with the origins (IDSN + 1) other captures of the
        run found for connections whose key this capture lacks (`analysis.dsn.key_origins`),
        so its DSNs are relative to the same origin as theirs."""
        mine = set(self.dsn_origins())
        if not any(t in origins and t not in mine for t in set(self.dsn["token"])):
            return
        ddir = self.flow_rows["data_dir"].to_numpy().astype(np.int64)
        self.dsn = dsn_analysis(self.table, self.flows, self.segments, ddir, origins)
        self.connections = connection_table(self.dsn, self.flows.flows)

    def rtt(self) -> pd.DataFrame:
        """RTT samples at this capture: flow_id, capture, t (s), rtt_ms."""
        ddir = self.flow_rows["data_dir"].to_numpy().astype(np.int64)
        r = self.rtt_samples if self.rtt_samples is not None else \
            M.rtt_samples(self.segments, ddir)
        ids = self.flow_rows["flow_id"].to_numpy()
        return pd.DataFrame({"flow_id": text_column(r["flow"].to_numpy().astype(np.int64), ids),
                             "capture": self.name, "t": r["t"].to_numpy(float),
                             "rtt_ms": r["rtt_ms"].to_numpy(float)})
