"""Fill a run's ``metrics/`` from its captures and samples: `analyze_bundle(run_dir)`.

Which capture answers what, when a flow was captured at several interfaces (from
``metadata.json``'s ``interfaces`` map, capture files named ``<host>-<intf>.pcap``):

* bytes, FCT, throughput, retransmissions, RTT: the capture at the data *sender*;
* reordering (TCP and MPTCP data level): the capture(s) at the data *receiver*;
* bytes delivered in order over time (timeseries kind ``delivered``, top-level TCP flows):
  the data receiver's ACKs, at the capture at the receiver (without one, at the flow's
  best-covered capture: the ACKs as they reach the sender, one path later);
* without an interfaces map, the capture holding most of the flow's packets (ties: the
  first by name); for an MPTCP connection's data level, the capture that saw most of its
  subflows.

Everything is read and computed before anything is written; each file is written through
a temporary file and renamed, so a failure never leaves a half-written table.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import order as O
from analysis import samples as S
from analysis.capture import CaptureAnalysis
from analysis.dsn import arrival_order, connection_table
from analysis.pcap import DEFAULT_CHUNK_BYTES, Progress
from analysis.rows import CONNECTION, label_rows, unsized_transfers
from analysis.run_series import TIMESERIES_COLUMNS, run_timeseries
from analysis.sequence import first_seen_bytes
from testbed.core import safefiles
from testbed.results import columns as C
from testbed.results.bundle import check_format
from testbed.results.typed import write_typed

# the columns are declared once, with dtype, unit and definition, in testbed.results.columns
FLOW_COLUMNS = C.names("flows")
RTT_COLUMNS = C.names("rtt")
HEADLINE_KEYS = tuple(c.name for c in C.HEADLINE)
LONG_FLOW_BYTES = 1_000_000   # headline: "long" flows carry at least this much
SHORT_FLOW_BYTES = 100_000    # ... and "short" flows less than this
REORDER_FIELDS = ["data_packets", "reordered_packets", "reorder_ratio", "reorder_extent_max"]
ORDER_FIELDS = ["ooo_packets", "ooo_ratio"]  # `analysis.order`: sender's vs receiver's capture
DEFAULT_BIN_S = 0.1


def captures_of(run_dir: Path, warnings: list[str] | None = None) -> list[Path]:
    """The capture files of a run, sorted by name (symbolic links skipped, with a warning)."""
    return safefiles.files_in(run_dir, "pcap", (".pcap", ".pcapng"), warnings)


def load_metadata(run_dir: Path) -> dict:
    """metadata.json as a dict ({} when absent or a symbolic link).

    Raises `BundleFormatError` for a bundle in a newer format than this testbed reads."""
    p = safefiles.file_in(run_dir, "metadata.json")
    if p is None:
        return {}
    try:
        meta = json.loads(safefiles.read_text(p))
    except json.JSONDecodeError as exc:
        raise S.SampleFormatError(f"{p}: not valid JSON ({exc.msg}); re-run the run") from None
    except RecursionError:
        raise S.SampleFormatError(f"{p}: not valid JSON (nested too deeply)") from None
    if not isinstance(meta, dict):
        raise S.SampleFormatError(f"{p}: not a JSON object; re-run the run")
    check_format(meta, p)
    check_shapes(meta, p)
    return meta


# the metadata.json keys the analysis reads, and what each must hold when present
_OBJECT_KEYS = ("interfaces", "captures", "controller", "readiness", "fidelity_raw", "links",
                "params")


def check_shapes(meta: dict, path: Path) -> None:
    """Raise `SampleFormatError` (one line naming the file and the key) when a key the
    analysis reads holds the wrong kind of value: ``t0`` a number, the others objects
    (null allowed), and each ``interfaces`` entry an object whose ``host`` and ``addr``
    are text.  A run writes them so; anything else was edited or damaged."""
    def bad(key: str, want: str, value: object) -> S.SampleFormatError:
        return S.SampleFormatError(
            f"{path}: {key} holds {type(value).__name__} {str(value)[:40]!r}, not {want}; "
            "the file was edited or damaged: re-run the run (or restore it)")

    t0 = meta.get("t0")
    if t0 is not None and (isinstance(t0, bool) or not isinstance(t0, (int, float))):
        raise bad("t0", "a number (epoch seconds)", t0)
    for key in _OBJECT_KEYS:
        value = meta.get(key)
        if value is not None and not isinstance(value, dict):
            raise bad(key, "an object", value)
    for intf, info in (meta.get("interfaces") or {}).items():
        if not isinstance(info, dict):
            raise bad(f"interfaces.{intf}", "an object {host, path, addr}", info)
        for field in ("host", "addr"):
            v = info.get(field)
            if v is not None and not isinstance(v, str):
                raise bad(f"interfaces.{intf}.{field}", "text", v)


def capture_interfaces(meta: dict) -> dict[str, dict]:
    """Capture file stem -> its entry of metadata.json's interfaces map.

    Captures are named ``<node>-<intf>.pcap`` (testbed.host.capture), e.g. ``client-client-eth0``
    for interface ``client-eth0``; a bare ``<intf>`` stem is accepted too.
    """
    out = {}
    for intf, info in (meta.get("interfaces") or {}).items():
        host = info.get("host", intf.split("-")[0])
        entry = {**info, "host": host, "intf": intf}
        out[intf] = entry
        out[f"{host}-{intf}"] = entry
    return out


def _host_addrs(meta: dict) -> tuple[dict[str, str], dict[str, set[str]]]:
    """(capture stem -> host, host -> its addresses) from the interfaces map."""
    cap_host, addrs = {}, {}
    for stem, info in capture_interfaces(meta).items():
        cap_host[stem] = info["host"]
        if info.get("addr"):
            addrs.setdefault(info["host"], set()).add(str(info["addr"]).split("/")[0])
    return cap_host, addrs


def _pick(rows: pd.DataFrame, cap_host: dict, addrs: dict, side: str) -> pd.DataFrame:
    """Per flow_id, the row from the capture at the data sender (side='src') or receiver."""
    ddir = rows["data_dir"].to_numpy()
    sender = np.where(ddir == 0, rows["src_addr"], rows["dst_addr"])
    receiver = np.where(ddir == 0, rows["dst_addr"], rows["src_addr"])
    want = sender if side == "src" else receiver
    host = rows["capture"].map(lambda c: cap_host.get(c, ""))
    at = np.array([a in addrs.get(h, ()) for a, h in zip(want, host, strict=True)], bool)
    score = at * 10**12 + rows["packets"].to_numpy()
    # ties (the same packets at both ends, no interfaces map) go to the first capture by
    # name, so the order the captures were given in changes nothing
    return rows.assign(_score=score).sort_values(
        ["flow_id", "_score", "capture"], ascending=[True, False, True], kind="stable"
    ).drop_duplicates("flow_id").drop(columns="_score")


def _at(capture: str, addr: str, cap_host: dict, addrs: dict) -> bool:
    return addr in addrs.get(cap_host.get(capture, ""), ())


def _ooo(caps: list[CaptureAnalysis], base: pd.DataFrame, cap_host: dict, addrs: dict
         ) -> pd.DataFrame:
    """`analysis.order.ooo_table` for every TCP flow (or subflow) captured both at its
    data sender and at its data receiver; null for the others."""
    by_name = {c.name: c for c in caps}
    index = {c.name: pd.Series(np.arange(len(c.flow_rows)), index=c.flow_rows["flow_id"])
             for c in caps}
    pairs = []
    for r in base[base["proto"] == "tcp"].itertuples(index=False):
        fwd = int(r.data_dir) == 0
        sender, receiver = (r.src_addr, r.dst_addr) if fwd else (r.dst_addr, r.src_addr)
        scap, rcap = r.capture, r.capture_receiver
        if not (isinstance(rcap, str) and scap != rcap and _at(scap, sender, cap_host, addrs)
                and _at(rcap, receiver, cap_host, addrs)):
            continue
        keys = []
        for name in (scap, rcap):
            cap = by_name[name]
            fi = int(index[name][r.flow_id])
            ddir = int(cap.flow_rows["data_dir"].iat[fi])
            keys.append(O.flow_keys(cap.segments, cap.table.cols["seq"], fi, ddir))
        pairs.append((r.flow_id, keys[0], keys[1]))
    return O.ooo_table(pairs)


def _receiver_captures(token_rows: pd.DataFrame, cap_host: dict, addrs: dict,
                       present: set[str]) -> list[str]:
    ddir = token_rows["data_dir"].to_numpy()
    receiver = set(np.where(ddir == 0, token_rows["dst_addr"], token_rows["src_addr"]))
    hosts = {h for h, a in addrs.items() if a & receiver}
    return sorted(c for c, h in cap_host.items() if h in hosts and c in present)


def _widest_capture(allrows: pd.DataFrame, subflows: pd.Series) -> str:
    """Without an interfaces map: the capture that saw most of a connection's subflows
    (then most of their packets, then the first by name), e.g. the single-homed server's,
    not one client interface's with one subflow of several."""
    rows = allrows[allrows["flow_id"].isin(set(subflows))]
    seen = rows.groupby("capture").agg(n=("flow_id", "nunique"), packets=("packets", "sum"))
    seen = seen.reset_index().sort_values(["n", "packets", "capture"],
                                          ascending=[False, False, True], kind="stable")
    return str(seen["capture"].iloc[0])


def build_tables(caps: list[CaptureAnalysis], meta: dict, appflows: pd.DataFrame,
                 bin_s: float = DEFAULT_BIN_S) -> dict[str, pd.DataFrame]:
    """flows and timeseries tables of a run from its analysed captures.

    caps: one `CaptureAnalysis` per capture; meta: metadata.json; appflows: samples/flows.jsonl
    table; bin_s: throughput bin width (s).  A capture that lacks an MPTCP connection's
    key (a join subflow's interface) has its data level redone with the origin another
    capture found (`CaptureAnalysis.align_dsn`), so data sequence numbers compare across
    captures.
    """
    origins: dict[str, int] = {}
    for c in caps:
        origins.update(c.dsn_origins())
    for c in caps:
        c.align_dsn(origins)
    cap_host, addrs = _host_addrs(meta)
    allrows = pd.concat([c.flow_rows for c in caps], ignore_index=True) if caps else None
    t0 = float(meta.get("t0") or (min((c.table.cols["ts_ns"].min() / 1e9 for c in caps
                                       if len(c.table)), default=0.0)))
    if allrows is None or not len(allrows):
        return {"flows": pd.DataFrame({k: [] for k in FLOW_COLUMNS}),
                "timeseries": pd.DataFrame({k: [] for k in TIMESERIES_COLUMNS}),
                "connections": connection_table(pd.DataFrame(), pd.DataFrame())}
    base = _pick(allrows, cap_host, addrs, "src").set_index("flow_id")
    recv = _pick(allrows, cap_host, addrs, "dst").set_index("flow_id")
    base[REORDER_FIELDS] = recv[REORDER_FIELDS].reindex(base.index)
    base["capture_receiver"] = recv["capture"].reindex(base.index)
    base = base.reset_index()
    ooo = _ooo(caps, base, cap_host, addrs).set_index("flow_id")
    for col in ORDER_FIELDS:
        base[col] = ooo[col].reindex(base["flow_id"]).to_numpy()
    base["protocol"] = np.where(base["mptcp_role"] != "", "mptcp-subflow", base["proto"])
    base["parent"] = np.where(base["mptcp_token"] != "", "mptcp:" + base["mptcp_token"], "")
    # MPTCP connections: data level at the receiver's captures
    conn_rows = []
    conn_at: dict[str, list[str]] = {}  # connection -> the captures it is counted at
    by_name = {c.name: c for c in caps}
    for token, sub in base[base["mptcp_token"] != ""].groupby("mptcp_token"):
        names = _receiver_captures(sub, cap_host, addrs, set(by_name)) or \
            [_widest_capture(allrows, sub["flow_id"])]
        # one stream over every interface of the receiver, classified again as such: a
        # segment on one interface is reordered or sent again with respect to the others
        dsn = arrival_order([by_name[n].dsn[by_name[n].dsn["token"].to_numpy() == token]
                             for n in names if n in by_name])
        ct = connection_table(dsn, sub)
        if not len(ct):
            continue
        r = ct.iloc[0]
        conn_at[f"mptcp:{token}"] = [n for n in names if n in by_name]
        first = sub.sort_values("start").iloc[0]
        conn_rows.append({
            "flow_id": f"mptcp:{token}", "capture": first["capture"],
            "capture_receiver": ",".join(names), "protocol": "mptcp", "proto": "tcp",
            "parent": "", "mptcp_token": token, "mptcp_role": "connection",
            "src_addr": first["src_addr"], "sport": first["sport"],
            "dst_addr": first["dst_addr"], "dport": first["dport"],
            "syn_seen": bool(first["syn_seen"]), "packets": int(sub["packets"].sum()),
            "frames_fwd": int(sub["frames_fwd"].sum()),
            "frame_bytes_fwd": int(sub["frame_bytes_fwd"].sum()),
            "frames_rev": int(sub["frames_rev"].sum()),
            "frame_bytes_rev": int(sub["frame_bytes_rev"].sum()), "bytes": int(r["data_bytes"]),
            "start": float(sub["start"].min()), "end": float(sub["end"].max()),
            "retransmissions": int(sub["retransmissions"].sum()),
            "reordered_packets": int(r["dsn_reordered_packets"]),
            "reorder_ratio": float(r["dsn_reorder_ratio"]),
            "reorder_extent_max": int(r["dsn_reorder_extent_max"]),
            "data_packets": int(r["data_packets"]),
            "loss_estimate": float(sub["loss_estimate"].mean()),
            "rtt_ms_median": float(sub["rtt_ms_median"].median())})
    # a handshake that fell back to TCP (no data-level mapping seen): a TCP flow
    fell_back = (base["parent"] != "") & ~base["mptcp_token"].isin(
        [r["mptcp_token"] for r in conn_rows])
    base.loc[fell_back, ["protocol", "parent"]] = ["tcp", ""]
    flows = pd.concat([base, pd.DataFrame(conn_rows)], ignore_index=True) if conn_rows else base
    conn = flows["protocol"] == "mptcp"
    flows.loc[conn, "fct_s"] = flows.loc[conn, "end"] - flows.loc[conn, "start"]
    flows.loc[conn, "throughput_bps"] = (flows.loc[conn, "bytes"] * 8
                                         / flows.loc[conn, "fct_s"].where(flows.loc[conn, "fct_s"]
                                                                          > 0))
    flows = label_rows(flows, meta, appflows)
    flows = _rates_while_sending(flows, caps, appflows, meta, conn_at
                                 ).reindex(columns=FLOW_COLUMNS)
    path_of = {stem: info.get("path") for stem, info in capture_interfaces(meta).items()}
    ts = run_timeseries(caps, base, path_of, t0, bin_s, conn_at)
    return {"flows": flows, "timeseries": ts}


def _rates_while_sending(flows: pd.DataFrame, caps: list[CaptureAnalysis],
                         appflows: pd.DataFrame, meta: dict,
                         conn_at: dict[str, list[str]]) -> pd.DataFrame:
    """``throughput_bps`` of every row of a transfer the flow tool ran without a size: what
    its receiver got while the sender sent (before the traffic phase ended, or its
    ``duration`` was over) over that time from its first SYN.  After its sender is stopped
    a transfer drains what it had queued, an MPTCP connection slower than it ran (one
    subflow finishes after the others), so bytes over its whole span read low.

    A TCP flow or subflow counts the bytes its receiver acknowledged (at the receiver's
    capture, as the ``delivered`` series); a connection the data-level bytes that reached
    its receiver's captures, each once (as its ``connection`` series; not its subflows'
    ACKs, which count a byte sent again on another subflow twice).  A row without such
    packets (UDP, a capture of one direction) keeps its rate over its span."""
    unsized, duration = unsized_transfers(flows, appflows)
    t_end = pd.to_numeric(pd.Series([meta.get("t_traffic_end")]), errors="coerce").iloc[0]
    if not unsized.any() or not np.isfinite(t_end):
        return flows
    start = flows["start"].to_numpy(float)
    stop = np.where(np.isnan(duration), t_end, np.minimum(t_end, start + duration))
    sub = flows["parent"].fillna("").to_numpy() != ""
    # a subflow sends until its connection's sender stops
    conn_stop = pd.Series(stop, index=flows["flow_id"].to_numpy())
    stop = np.where(sub, flows["parent"].map(conn_stop).to_numpy(float), stop)
    got = np.full(len(flows), np.nan)
    by_name = {c.name: c for c in caps}
    kind = flows["kind"].to_numpy()
    tcp = unsized & (kind != CONNECTION)
    where = flows["capture_receiver"].where(flows["capture_receiver"].notna(),
                                            flows["capture"]).to_numpy()
    for name in set(where[tcp]):
        c = by_name.get(name)
        if c is None:
            continue
        at = np.flatnonzero(tcp & (where == name))
        k = pd.Series(np.arange(len(c.flow_rows)), index=c.flow_rows["flow_id"].to_numpy()
                      ).reindex(flows["flow_id"].to_numpy()[at]).to_numpy()
        at, k = at[~np.isnan(k)], k[~np.isnan(k)].astype(np.int64)
        rr, f, nb = c.delivered_bytes_per_packet()
        limit = np.full(len(c.flow_rows), -np.inf)
        limit[k] = stop[at] * 1e9
        keep = c.table.cols["ts_ns"][rr] < limit[f]
        acked = np.bincount(f[keep], weights=nb[keep], minlength=len(c.flow_rows))
        seen = np.bincount(f, minlength=len(c.flow_rows)) > 0
        got[at] = np.where(seen[k], acked[k], np.nan)
    for i in np.flatnonzero(unsized & (kind == CONNECTION)):
        key, token = flows["flow_id"].iat[i], flows["flow_id"].iat[i].removeprefix("mptcp:")
        parts = [by_name[n].dsn[by_name[n].dsn["token"].to_numpy() == token]
                 for n in conn_at.get(key, []) if n in by_name]
        d = pd.concat(parts, ignore_index=True).sort_values("ts", kind="stable") if parts \
            else None
        if d is not None and len(d):
            new = first_seen_bytes(np.zeros(len(d), np.int64), d["dsn"].to_numpy(),
                                   d["end"].to_numpy())
            got[i] = float(new[d["ts"].to_numpy() < stop[i] * 1e9].sum())
    span = stop - start
    ok = unsized & ~np.isnan(got) & (span > 0)
    rate = np.where(ok, got * 8 / np.where(span > 0, span, 1.0), np.nan)
    flows["throughput_bps"] = np.where(ok, rate, flows["throughput_bps"])
    return flows


def headline(flows: pd.DataFrame) -> dict:
    """Headline numbers of a run (for summary.parquet) over its top-level flows.

    flows, bytes, throughput_bps_mean, fct_s_median, retransmissions, reorder_ratio_mean
    (mean over flows), ooo_percent (reordered / unique data packets over all flows, in %),
    and for P1-style mixes long_throughput_bps_mean (flows >= LONG_FLOW_BYTES) and
    short_fct_s_mean (flows < SHORT_FLOW_BYTES).
    """
    top = flows[flows["parent"].fillna("") == ""]
    nbytes = pd.to_numeric(top["bytes"], errors="coerce").fillna(0)

    def mean(s: pd.Series) -> float:
        v = pd.to_numeric(s, errors="coerce")
        return float(v.mean()) if v.notna().any() else float("nan")

    reord = pd.to_numeric(top["reordered_packets"], errors="coerce").fillna(0)
    uniq = pd.to_numeric(top["data_packets"], errors="coerce").fillna(0)
    return {"flows": len(top), "bytes": int(nbytes.sum()),
            "throughput_bps_mean": mean(top["throughput_bps"]),
            "fct_s_median": float(pd.to_numeric(top["fct_s"], errors="coerce").median())
            if len(top) else float("nan"),
            # top-level rows only: a connection's row already sums its subflows'
            "retransmissions": int(pd.to_numeric(top["retransmissions"]).fillna(0).sum()),
            "reorder_ratio_mean": mean(top["reorder_ratio"]),
            "ooo_percent": 100.0 * float(reord.sum()) / float(uniq.sum()) if uniq.sum()
            else float("nan"),
            "long_throughput_bps_mean": mean(top.loc[nbytes >= LONG_FLOW_BYTES,
                                                     "throughput_bps"]),
            "short_fct_s_mean": mean(top.loc[nbytes < SHORT_FLOW_BYTES, "fct_s"])}


def analyze_bundle(run_dir: str | Path, bin_s: float = DEFAULT_BIN_S,
                   chunk_bytes: int = DEFAULT_CHUNK_BYTES, progress: Progress | None = None,
                   warnings: list[str] | None = None) -> dict:
    """Compute ``RUN/metrics/*.parquet`` and return the run's headline metrics.

    run_dir: a result bundle; bin_s: throughput bin (s); chunk_bytes: capture read buffer;
    progress: called with (capture, bytes read, its size) while reading (`analysis.pcap`).
    Missing inputs (no captures, no samples) give empty tables with the right columns.
    Raises `CaptureFormatError` for a corrupt capture before anything is written.
    Symbolic links inside the bundle are never followed: a linked capture or sample file
    is skipped (a line in warnings), a linked ``metrics/`` raises `UnsafeFileError`.
    """
    run = Path(run_dir)
    if safefiles.check(run, run / "metrics", "dir") not in (None, "missing"):
        raise safefiles.UnsafeFileError(f"{run / 'metrics'}: not a directory of the bundle "
                                        "(a symbolic link?); nothing is written through it")
    meta = load_metadata(run)
    caps = [CaptureAnalysis.of(p, chunk_bytes, progress, all_columns=False)
            for p in captures_of(run, warnings)]

    def sample(name: str) -> Path | None:
        return safefiles.file_in(run, f"samples/{name}", warnings)

    app = S.read_jsonl(sample("flows.jsonl"), S.APPFLOW_COLUMNS)
    tables = build_tables(caps, meta, app, bin_s)
    rtt = pd.concat([c.rtt() for c in caps], ignore_index=True) if caps else \
        pd.DataFrame({k: [] for k in RTT_COLUMNS})
    t0 = meta.get("t0")
    cwnd = S.read_jsonl(sample("cwnd.jsonl"), S.CWND_COLUMNS)
    ping = S.read_jsonl(sample("ping.jsonl"), S.PING_COLUMNS)
    events = S.read_jsonl(sample("events.jsonl"), S.EVENT_COLUMNS)
    if isinstance(t0, (int, float)) and not isinstance(t0, bool):
        cwnd["t_rel"] = cwnd["t"] - float(t0)
        ping["t_rel"] = ping["t"] - float(t0)
        events["t_rel"] = events["t_applied"] - float(t0)
    out = run / "metrics"
    for name, df in (("flows", tables["flows"]), ("timeseries", tables["timeseries"]),
                     ("cwnd", cwnd), ("ping", ping), ("events", events), ("rtt", rtt)):
        for problem in write_typed(name, df, out / f"{name}.parquet"):
            if warnings is not None:  # a writer's defect, caught by the tests
                warnings.append(f"metrics/{name}.parquet: {problem}")
    head = headline(tables["flows"])
    head["captures"] = len(caps)
    head["packets"] = int(sum(len(c.table) for c in caps))
    return head
