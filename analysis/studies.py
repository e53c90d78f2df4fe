"""Paper-vs-ours for the five reproduced studies, and their qualitative claims.

`evaluate(study_dir, out)` reads a study's ``paper.toml`` and the result folders that
``testbed study`` wrote (``out/<spec stem>/`` with one bundle per run) and returns
`Comparison` rows (the paper's number next to ours) and `Claim` s (the paper's
qualitative finding, whether our runs show it, and the measured values behind the
verdict).  `write_study_report` renders them into ``out/report.html`` with links to each
spec's own report.  A claim is never bent: when our runs do not show it, the verdict
says so and the values are reported.

Which number answers which claim (see each study's README):

* P0  MPTCP over WiFi+3G vs the best single path (``paths``); file throughput with the
  WiFi video running, TCP vs MPTCP (``heavy_load``); 2 vs 1 subflows (``subflows``);
  delivery during the WiFi outage, TCP vs MPTCP (``outage``).
* P1  short-flow FCT, long-flow throughput and the short flow's out-of-order share per
  forwarding policy (``static``, ``random``).
* P2  MPTCP goodput per bandwidth configuration and congestion control; ping table.
* P3  TCP's throughput after each handover against the ideal of the paper's eq. 2,
  computed from the spec's own schedule.
* P4  aggregate throughput as a share of the total bandwidth, 64 KiB vs a large buffer.
"""

from __future__ import annotations

import html
import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from testbed.core import safefiles
from testbed.core.compat import tomllib
from testbed.core.errors import InputError
from testbed.core.safefiles import atomic_write_text

KBPS = 1024 * 8  # the papers' "KB/s" (ifstat) in bit/s


@dataclass
class Comparison:
    """One number of the paper next to ours. unit: of both values; note: how ours is made."""

    figure: str
    quantity: str
    paper: float | None
    ours: float | None
    unit: str
    note: str = ""


@dataclass
class Claim:
    """A qualitative claim; holds is None when our runs cannot decide it (missing data)."""

    figure: str
    text: str
    holds: bool | None
    measured: dict[str, float] = field(default_factory=dict)
    note: str = ""


@dataclass
class StudyResult:
    """Everything the study report shows."""

    study: str
    title: str
    comparisons: list[Comparison] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------
# loading what `testbed study` wrote


def _complete_runs(spec_out: Path) -> list[Path]:
    runs = []
    if not spec_out.is_dir():
        return runs
    for run in sorted(spec_out.iterdir()):
        meta_file = safefiles.file_in(spec_out, f"{run.name}/metadata.json")
        if meta_file is None:  # absent, or a symbolic link: never followed
            continue
        try:
            meta = json.loads(safefiles.read_text(meta_file))
        except (OSError, ValueError, RecursionError, InputError):
            continue
        if not isinstance(meta, dict):
            continue
        if meta.get("status") == "complete":
            runs.append(meta_file.parent)
    return runs


def _params(run: Path) -> dict:
    meta = json.loads(safefiles.read_text(run / "metadata.json"))  # checked by _complete_runs
    params = meta.get("params")
    out = {}
    for k, v in (params.items() if isinstance(params, dict) else ()):
        out[k] = json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v
    return out


def run_table(spec_out: Path, name: str) -> pd.DataFrame:
    """One metrics table (flows, timeseries, ...) of every complete run, with run columns.

    spec_out: a spec's output folder; name: the table name under metrics/.
    """
    parts = []
    for run in _complete_runs(spec_out):
        f = safefiles.file_in(run, f"metrics/{name}.parquet")
        if f is None:
            continue
        df = pd.read_parquet(io.BytesIO(safefiles.read_bytes(f)))
        df = df.assign(run_id=run.name, **{f"param:{k}": v for k, v in _params(run).items()})
        parts.append(df)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def top_flows(spec_out: Path) -> pd.DataFrame:
    """Connection-level flows (not MPTCP subflows) of every complete run."""
    flows = run_table(spec_out, "flows")
    if flows.empty:
        return flows
    return flows[flows["parent"].fillna("") == ""].copy()


def _num(s: pd.Series) -> pd.Series:
    return pd.to_numeric(s, errors="coerce")


def _select_runs(df: pd.DataFrame, run_filter: dict | None) -> pd.DataFrame | None:
    """Rows of the runs whose parameters match run_filter; None if a key is unknown."""
    for k, v in (run_filter or {}).items():
        if k not in df:
            return None
        df = df[df[k].astype(str) == str(v)]
    return df


def workload_rate(flows: pd.DataFrame, workload: str, run_filter: dict | None = None
                  ) -> float | None:
    """Mean throughput (bit/s) of the flows of one workload (summed per run, then averaged).

    flows: `top_flows`; workload: its name; run_filter: {"param:key": value} to select runs.
    """
    if flows.empty or "workload" not in flows:
        return None
    sel = _select_runs(flows[flows["workload"] == workload], run_filter)
    if sel is None or sel.empty:
        return None
    per_run = sel.groupby("run_id").apply(
        lambda g: (_num(g["bytes"]).sum() * 8)
        / max(_num(g["end"]).max() - _num(g["start"]).min(), 1e-9), include_groups=False)
    return float(per_run.mean())


SENT = ("flow", "connection")
DELIVERED = ("delivered", "connection")


def window_rate(spec_out: Path, t_from: float, t_to: float,
                run_filter: dict | None = None, kinds: tuple[str, ...] = SENT,
                table: pd.DataFrame | None = None) -> float | None:
    """Average rate (bit/s) in [t_from, t_to) seconds after the run's start.

    Sums the goodput series of every top-level flow per run, then averages over the runs
    that match run_filter (a run without data in the window counts as 0).  kinds: the
    timeseries kinds to add up -- `SENT`: TCP/UDP flows' new data at the sender ("flow")
    and MPTCP connections ("connection"; their subflows are not added again); `DELIVERED`:
    TCP flows' bytes acknowledged by their receiver ("delivered") instead of "flow", except
    in runs analysed before that series existed, which count "flow".  table: the
    timeseries of spec_out if already loaded (`run_table`).
    """
    ts = run_table(spec_out, "timeseries") if table is None else table
    if ts.empty:
        return None
    wanted = ts["kind"].isin(list(kinds))
    if "delivered" in kinds:
        has = ts.loc[ts["kind"] == "delivered", "run_id"].unique()
        wanted |= (ts["kind"] == "flow") & ~ts["run_id"].isin(has)
    sel = _select_runs(ts[wanted], run_filter)
    if sel is None or sel.empty:
        return None
    t_rel = _num(sel["t_rel"])
    sel = sel[(t_rel >= t_from - 1e-9) & (t_rel < t_to - 1e-9)]
    rate = _num(sel["goodput_bps"]).fillna(_num(sel["rate_bps"]))
    sel = sel.assign(_bits=rate * _num(sel["bin_s"]))
    per_run = sel.groupby("run_id")["_bits"].sum() / (t_to - t_from)
    matching = _select_runs(ts, run_filter)
    runs = set(matching["run_id"]) if matching is not None else set()
    per_run = per_run.reindex(sorted(runs), fill_value=0.0)
    return float(per_run.mean()) if len(per_run) else None


def _resolved_spec(spec_out: Path) -> dict | None:
    runs = _complete_runs(spec_out)
    if not runs:
        return None
    spec = safefiles.file_in(runs[0], "spec.toml")
    return tomllib.loads(safefiles.read_text(spec)) if spec is not None else None


# ---------------------------------------------------------------------------------------
# the ideal of P3's eq. 2 from a spec's schedule


def capacity_steps(spec: dict, link: str) -> list[tuple[float, float]]:
    """[(from_time_s, capacity_bps)] of one path as the spec's schedule changes it."""
    from testbed.core.units import parse_duration, parse_rate

    paths = {p["name"]: p for p in spec["topology"]["paths"]}
    bw = float(parse_rate(paths[link]["bw"]))
    up = True
    steps = [(0.0, bw)]
    for ev in sorted(spec.get("schedule", []), key=lambda e: parse_duration(e["at"])):
        if ev.get("link") != link:
            continue
        if "bw" in ev:
            bw = float(parse_rate(ev["bw"]))
        if "down" in ev:
            up = not ev["down"]
        if "up" in ev:
            up = bool(ev["up"])
        steps.append((parse_duration(ev["at"]), bw if up else 0.0))
    return steps


def applied_steps(spec: dict, link: str, events: pd.DataFrame) -> list[tuple[float, float]]:
    """[(from_time_s, capacity_bps)] of one path as a run's schedule really changed it.

    events: that run's ``metrics/events`` (t_rel = when a change was applied, s after t0;
    changes as JSON).  The schedule player is a few tens of ms late under emulation; over
    a 5 s window 30 ms of a 10 Mbit/s link before the drop are 17 % of a 384 kbit/s
    ideal, so the ideal counts the link as it was.  Events that failed are left out.
    """
    from testbed.core.units import parse_rate

    paths = {p["name"]: p for p in spec["topology"]["paths"]}
    bw, up = float(parse_rate(paths[link]["bw"])), True
    steps = [(0.0, bw)]
    mine = events[(events["link"] == link) & events["error"].isna()].sort_values("t_rel")
    for t, changes in zip(mine["t_rel"], mine["changes"], strict=True):
        ch = json.loads(changes)
        bw = float(ch.get("bw_bps", bw))
        up = bool(ch.get("up", up))
        steps.append((float(t), bw if up else 0.0))
    return steps


def ideal_rate(steps: list[tuple[float, float]], t_from: float, t_to: float) -> float:
    """The paper's eq. 2: sum(bandwidth x time) / time over [t_from, t_to)."""
    total = 0.0
    for i, (t, cap) in enumerate(steps):
        t_next = steps[i + 1][0] if i + 1 < len(steps) else math.inf
        lo, hi = max(t, t_from), min(t_next, t_to)
        if hi > lo:
            total += cap * (hi - lo)
    return total / (t_to - t_from)


# ---------------------------------------------------------------------------------------
# per study


def _fig(paper: dict, key: str) -> dict:
    return (paper.get("figures") or {}).get(key, {})


def _fmt_claim(values: dict[str, float | None]) -> dict[str, float]:
    return {k: round(v, 4) for k, v in values.items() if v is not None and not math.isnan(v)}


def p0(paper: dict, out: Path, res: StudyResult) -> None:
    flows = top_flows(out / "paths")
    rates = {w: workload_rate(flows, w) for w in
             ("tcp-wifi", "tcp-cell", "mptcp-reno", "mptcp-cubic", "mptcp-bbr")}
    for w, r in rates.items():
        res.comparisons.append(Comparison("Fig. 2 / Fig. 6", f"throughput {w}", None,
                                          None if r is None else r / 1e6, "Mbit/s",
                                          "paper shows curves only"))
    best_tcp = max((r for w, r in rates.items() if w.startswith("tcp") and r), default=None)
    best_mptcp = max((r for w, r in rates.items() if w.startswith("mptcp") and r),
                     default=None)
    res.claims.append(Claim(
        "Fig. 2", "MPTCP over WiFi + 3G beats the best single path",
        None if best_tcp is None or best_mptcp is None else best_mptcp > best_tcp,
        _fmt_claim({"best_tcp_mbit": best_tcp and best_tcp / 1e6,
                    "best_mptcp_mbit": best_mptcp and best_mptcp / 1e6})))
    fig3 = _fig(paper, "fig3_heavy_load")
    heavy = top_flows(out / "heavy_load")
    for w, paper_kbs in (fig3.get("values") or {}).items():
        r = workload_rate(heavy, w)
        res.comparisons.append(Comparison("Fig. 3", f"file throughput with video, {w}",
                                          float(paper_kbs), None if r is None else r / KBPS,
                                          "KB/s", "ours: the whole run, scaled links"))
    tcp_h, mp_h = workload_rate(heavy, "tcp-wifi"), workload_rate(heavy, "mptcp-cubic")
    res.claims.append(Claim("Fig. 3", "under heavy load MPTCP's file throughput exceeds TCP's",
                            None if tcp_h is None or mp_h is None else mp_h > tcp_h,
                            _fmt_claim({"tcp_kBps": tcp_h and tcp_h / KBPS,
                                        "mptcp_kBps": mp_h and mp_h / KBPS})))
    sub = top_flows(out / "subflows")
    key = "param:transport.subflows_per_path"
    one = workload_rate(sub, "file", {key: 1})
    two = workload_rate(sub, "file", {key: 2})
    gain = None if one is None or two is None else (two - one) / KBPS
    paper_gain = (_fig(paper, "fig4_subflows").get("values") or {}).get("gain_2_over_1")
    res.comparisons.append(Comparison("Fig. 4", "gain of 2 subflows over 1", paper_gain, gain,
                                      "KB/s"))
    res.claims.append(Claim("Fig. 4", "two subflows over one interface are faster than one",
                            None if gain is None else gain > 0,
                            _fmt_claim({"one_kBps": one and one / KBPS,
                                        "two_kBps": two and two / KBPS})))
    spec = _resolved_spec(out / "outage")
    if spec is not None:
        from testbed.core.units import parse_duration

        downs = [parse_duration(e["at"]) for e in spec.get("schedule", []) if e.get("down")]
        ups = [parse_duration(e["at"]) for e in spec.get("schedule", [])
               if e.get("down") is False or e.get("up")]
        t_down = downs[0] if downs else None
        t_up = ups[0] if ups else parse_duration(spec["duration"])
        if t_down is not None:
            key = "param:workload"
            ts = run_table(out / "outage", "timeseries")
            variants = sorted(ts[key].unique()) if key in ts else []
            during: dict[str, float | None] = {}
            for v in variants:
                label = "mptcp" if '"mptcp"' in v else "tcp"
                during[label] = window_rate(out / "outage", t_down + 0.5, t_up,
                                            run_filter={key: v})
            res.claims.append(Claim(
                "Fig. 5", "during the WiFi outage MPTCP keeps delivering data; TCP stalls "
                "until the application reconnects",
                None if during.get("mptcp") is None else bool(
                    during["mptcp"] > 0 and (during.get("tcp") or 0) < during["mptcp"]),
                _fmt_claim({f"{k}_kbit_during_outage": v and v / 1e3
                            for k, v in during.items()})))


def p1(paper: dict, out: Path, res: StudyResult) -> None:
    key = "param:controller.kind"
    for spec_name in ("static", "random"):
        flows = top_flows(out / spec_name)
        if flows.empty or key not in flows:
            res.missing.append(spec_name)
            continue
        by: dict[str, dict[str, float]] = {}
        for policy, g in flows.groupby(key):
            short = g[g["workload"] == "short"]
            long_ = g[g["workload"] == "long"]
            ooo = _num(short["ooo_ratio"]) if "ooo_ratio" in short else pd.Series(dtype=float)
            by[str(policy)] = {
                "short_fct_ms": float(_num(short["fct_s"]).mean() * 1e3),
                "long_mbit": float(_num(long_["throughput_bps"]).mean() / 1e6),
                # the paper's: share of each short flow's packets that arrive after a
                # packet sent later (sender's and receiver's captures; retransmissions
                # are not reorderings), averaged over short flows
                "short_ooo_pct": float(100 * ooo.mean()) if ooo.notna().any()
                else float("nan"),
                # RFC 4737 reordered-packet ratio at the receiver alone (counts a fast
                # retransmission with the same ms timestamp as reordered)
                "short_rfc4737_pct": float(100 * _num(short["reordered_packets"]).sum()
                                           / max(_num(short["data_packets"]).sum(), 1)),
            }
        paper_ooo = None
        for fig in (paper.get("figures") or {}).values():
            vals = fig.get("values") or {}
            if "ooo" in json.dumps(vals) or "out" in str(fig.get("metric", "")).lower():
                for v in vals.values():
                    if isinstance(v, (int, float)):
                        paper_ooo = float(v)
                        break
            if paper_ooo is not None:
                break
        for policy, m in sorted(by.items()):
            res.comparisons.append(Comparison(spec_name, f"short-flow FCT, {policy}", None,
                                              m["short_fct_ms"], "ms"))
            res.comparisons.append(Comparison(spec_name, f"long-flow throughput, {policy}",
                                              None, m["long_mbit"], "Mbit/s"))
            res.comparisons.append(Comparison(
                spec_name, f"short-flow packets out of order, {policy}",
                paper_ooo if policy == "spray" else None,
                None if math.isnan(m["short_ooo_pct"]) else m["short_ooo_pct"], "%"))
            res.comparisons.append(Comparison(
                spec_name, f"short-flow reordered packets (RFC 4737, receiver only), "
                f"{policy}", None, m["short_rfc4737_pct"], "%"))
        if "spray" in by and "single-path" in by:
            s, p = by["spray"], by["single-path"]
            res.claims.append(Claim(
                spec_name, "spraying's short-flow FCT is not worse than single-path's "
                "(within 10 %)", s["short_fct_ms"] <= 1.1 * p["short_fct_ms"],
                _fmt_claim({"spray_ms": s["short_fct_ms"], "single_path_ms": p["short_fct_ms"]})))
            known = not (math.isnan(s["short_ooo_pct"]) or math.isnan(p["short_ooo_pct"]))
            res.claims.append(Claim(
                spec_name, "spraying delivers some short-flow packets out of order, "
                "single-path forwarding (almost) none: spray's share is at least 10x "
                "single-path's, which is at most 0.1 %",
                bool(s["short_ooo_pct"] > 0 and p["short_ooo_pct"] <= 0.1
                     and s["short_ooo_pct"] >= 10 * p["short_ooo_pct"]) if known else None,
                _fmt_claim({"spray_ooo_pct": s["short_ooo_pct"],
                            "single_path_ooo_pct": p["short_ooo_pct"]})))


def p2(paper: dict, out: Path, res: StudyResult) -> None:
    for spec_name, key in (("bandwidth", "param:topology.paths.1.bw"),
                           ("cc", "param:transport.cc"), ("loss", "param:transport.cc")):
        flows = top_flows(out / spec_name)
        if flows.empty:
            res.missing.append(spec_name)
            continue
        # a spec without this sweep (loss, quick: cubic only) gives one value
        values = sorted(flows[key].astype(str).unique()) if key in flows else [None]
        for value in values:
            r = workload_rate(flows, "transfer", None if value is None else {key: value})
            label = "as specified" if value is None else f"{key[6:]}={value}"
            res.comparisons.append(Comparison(spec_name, f"MPTCP goodput, {label}",
                                              None, None if r is None else r / 1e6, "Mbit/s"))
    ping = run_table(out / "loss", "ping")
    if not ping.empty:
        rtt = _num(ping["rtt_ms"])
        lost = ping["lost"].astype(bool)
        measured = {"transmitted": float(len(ping)), "received": float((~lost).sum()),
                    "loss_pct": float(100 * lost.mean()), "rtt_min_ms": float(rtt.min()),
                    "rtt_avg_ms": float(rtt.mean()), "rtt_max_ms": float(rtt.max()),
                    "rtt_mdev_ms": float(rtt.std(ddof=0))}
        for k, v in measured.items():
            res.comparisons.append(Comparison("ping table", k, None, v, ""))
        res.claims.append(Claim("ping table", "10 % loss per direction shows as ping loss "
                                "well above zero", measured["loss_pct"] > 5,
                                _fmt_claim(measured)))


def p3(paper: dict, out: Path, res: StudyResult) -> None:
    for spec_dir in sorted(p for p in out.iterdir() if p.is_dir() and p.name.startswith("case")):
        spec = _resolved_spec(spec_dir)
        if spec is None:
            res.missing.append(spec_dir.name)
            continue
        from testbed.core.units import parse_duration

        link = spec["topology"]["paths"][0]["name"]
        steps = capacity_steps(spec, link)
        if len(steps) < 2:
            continue
        # the window: the planned handover (a bin edge) and the 5 s after it
        t_h = steps[1][0]
        t_end = parse_duration(spec["duration"])
        t_to = min(t_h + 5.0, t_end)
        key = "param:transport.cc"
        ts = run_table(spec_dir, "timeseries")
        events = run_table(spec_dir, "events")
        values = sorted(ts[key].astype(str).unique()) if key in ts else [None]
        # what the receiver got, as the paper's throughput is: right after a rate drop the
        # sender still transmits segments the new link's queue then drops
        runs = set(ts["run_id"]) if "run_id" in ts else set()
        old = len(runs - set(ts.loc[ts["kind"] == "delivered", "run_id"])) if runs else 0
        how = "delivered: the receiver's cumulative ACKs" + (
            f" ({old} of {len(runs)} runs analysed before that series existed: sent)"
            if old else "")
        for cc in values:
            # per run: its rate against the ideal of the link as its schedule was applied
            sel = ts if cc is None else ts[ts[key].astype(str) == cc]
            per_run = []
            for rid in sorted(set(sel["run_id"])):
                ev = events[events["run_id"] == rid] if "run_id" in events else events
                r_steps = applied_steps(spec, link, ev) if len(ev) else steps
                rate_r = window_rate(spec_dir, t_h, t_to, run_filter={"run_id": rid},
                                     kinds=DELIVERED, table=ts)
                per_run.append((rate_r, ideal_rate(r_steps, t_h, t_to)))
            got = [(r, i) for r, i in per_run if r is not None and i > 0]
            rate = sum(r for r, _ in got) / len(got) if got else None
            ideal = (sum(i for _, i in got) / len(got) if got
                     else ideal_rate(steps, t_h, t_to))
            util = 100 * sum(r / i for r, i in got) / len(got) if got else None
            label = f"{spec_dir.name}" + (f", {cc}" if cc else "")
            res.comparisons.append(Comparison(
                label, f"throughput {t_h:g}-{t_to:g} s", None,
                None if rate is None else rate / 1e6, "Mbit/s",
                f"{how}; ideal (eq. 2 over the link as applied, mean of {len(got)} runs) "
                f"{ideal / 1e6:.3f} Mbit/s (as planned {ideal_rate(steps, t_h, t_to) / 1e6:.3f})"))
            res.comparisons.append(Comparison(label, "utilisation of the ideal", None, util,
                                              "%"))
            if spec_dir.name.startswith("case1_wlan_to_imt"):
                res.claims.append(Claim(
                    label, "right after a 20 Mbit/s -> 384 kbit/s handover TCP stays well "
                    "below the ideal (< 80 %)", None if util is None else util < 80,
                    _fmt_claim({"utilisation_pct": util, "ideal_mbit": ideal / 1e6})))
    # the paper's TCP/mm utilisation figures, by table
    for name, fig in sorted((paper.get("figures") or {}).items()):
        vals = fig.get("values") or {}
        for k, v in vals.items():
            if isinstance(v, (int, float)) and "util" in str(k).lower():
                res.comparisons.append(Comparison(fig.get("source", name), f"paper: {k}",
                                                  float(v), None, "%"))


def p4(paper: dict, out: Path, res: StudyResult) -> None:
    for spec_name in ("simple", "three_paths", "cross_traffic"):
        spec = _resolved_spec(out / spec_name)
        flows = top_flows(out / spec_name)
        if spec is None or flows.empty:
            res.missing.append(spec_name)
            continue
        from testbed.core.units import parse_rate

        total = sum(parse_rate(p["bw"]) for p in spec["topology"]["paths"])
        key = "param:transport.rmem"
        values = sorted(flows[key].astype(str).unique()) if key in flows else [None]
        shares: dict[str, float | None] = {}
        for rmem in values:
            r = workload_rate(flows, "transfer", None if rmem is None else {key: rmem})
            share = None if r is None else 100 * r / total
            label = rmem or str(spec.get("transport", {}).get("rmem", "default"))
            shares[label] = share
            res.comparisons.append(Comparison(spec_name, f"aggregate / total bandwidth, "
                                              f"rmem {label}", None, share, "%"))
        if spec_name == "simple" and len(shares) >= 2:
            small = shares.get("64KiB")
            large = max((v for k, v in shares.items() if k != "64KiB" and v is not None),
                        default=None)
            res.claims.append(Claim(
                "simple", "a 64 KiB receive buffer lowers the aggregate on the 0.2 / 1 Mbit/s "
                "paths", None if small is None or large is None else small < large,
                _fmt_claim({"share_64KiB_pct": small, "share_large_pct": large})))


STUDIES: dict[str, Callable[[dict, Path, StudyResult], None]] = {
    "P0": p0, "P1": p1, "P2": p2, "P3": p3, "P4": p4}


def load_paper(study: Path) -> dict:
    """The study's paper.toml."""
    f = study / "paper.toml"
    if not f.exists():
        raise InputError(f"{study}: no paper.toml (the paper's numbers)")
    try:
        return tomllib.loads(f.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{f}: {exc}") from None


def evaluate(study: Path, out: Path) -> StudyResult:
    """Paper-vs-ours comparisons and claims for a study's results in out."""
    paper = load_paper(study)
    sid = str((paper.get("paper") or {}).get("id", "")).upper()
    res = StudyResult(study=sid or study.name, title=(paper.get("paper") or {}).get("title", ""))
    fn = STUDIES.get(sid)
    if fn is None:
        raise InputError(f"{study}/paper.toml: paper.id {sid!r} is not one of "
                         f"{', '.join(STUDIES)}")
    if out.is_dir():
        fn(paper, out, res)
    return res


# ---------------------------------------------------------------------------------------
# the study report


def _cell(v: float | None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{v:.4g}"


def render(res: StudyResult, paper: dict, out: Path) -> str:
    """The study report as one HTML page."""
    e = html.escape
    rows = "".join(
        f"<tr><td>{e(c.figure)}</td><td>{e(c.text)}</td><td class="
        f"{'ok' if c.holds else ('bad' if c.holds is False else 'na')}>"
        f"{'shown' if c.holds else ('not shown' if c.holds is False else 'no data')}</td>"
        f"<td>{e(json.dumps(c.measured))}</td></tr>" for c in res.claims)
    comps = "".join(
        f"<tr><td>{e(c.figure)}</td><td>{e(c.quantity)}</td><td>{_cell(c.paper)}</td>"
        f"<td>{_cell(c.ours)}</td><td>{e(c.unit)}</td><td>{e(c.note)}</td></tr>"
        for c in res.comparisons)
    figs = "".join(
        f"<li><b>{e(f.get('source', k))}</b> — {e(f.get('title', ''))}<br>"
        f"<i>{e(str(f.get('claim', '')).strip())}</i></li>"
        for k, f in (paper.get("figures") or {}).items())
    links = "".join(f'<li><a href="{e(href)}">{e(p.name)}</a></li>'
                    for p in sorted(out.iterdir())
                    if safefiles.file_in(out, f"{p.name}/report.html") is not None
                    and (href := safefiles.safe_href(f"{p.name}/report.html")) is not None)
    missing = (f"<p class=bad>No complete runs for: {e(', '.join(res.missing))}</p>"
               if res.missing else "")
    setup = e(str((paper.get("paper") or {}).get("setup", "")))
    banner = _fidelity_banner(out)
    return f"""<!doctype html><html><head><meta charset="utf-8">
<title>{e(res.study)}: {e(res.title)}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px}}
.ok{{background:#dfd}}.bad{{background:#fdd}}.na{{background:#eee}}
.fid{{padding:8px 12px;border-radius:4px;margin:1em 0;border:1px solid}}
.fid-ok{{background:#eaf6ea;border-color:#7b7}}.fid-warn,.fid-unknown{{background:#fff6e0;
border-color:#d90}}.fid-fail{{background:#fde8e8;border-color:#c44}}</style></head><body>
<h1>{e(res.study)}: {e(res.title)}</h1>{banner}
<p>{setup}</p>{missing}
<h2>The paper's claims, on our runs</h2>
<table><tr><th>figure</th><th>claim</th><th>ours</th><th>measured</th></tr>{rows}</table>
<h2>Paper vs ours</h2>
<table><tr><th>figure</th><th>quantity</th><th>paper</th><th>ours</th><th>unit</th>
<th>note</th></tr>{comps}</table>
<h2>The paper's figures</h2><ul>{figs}</ul>
<h2>Per-spec reports</h2><ul>{links}</ul>
</body></html>"""


def _fidelity_banner(out: Path) -> str:
    """The fidelity verdicts of every run of the study (each spec's summary.parquet)."""
    from analysis.report import fidelity_banner

    verdicts = []
    for summary in sorted(out.glob("*/summary.parquet")):
        try:
            s = pd.read_parquet(summary)
        except (OSError, ValueError):
            continue
        for _, r in s.iterrows():
            v = r.get("fidelity")
            reasons = r.get("fidelity_reasons")
            verdicts.append((f"{summary.parent.name}/{r.get('run_id')}",
                             v if isinstance(v, str) else "unknown",
                             reasons.split("; ") if isinstance(reasons, str) and reasons
                             else []))
    return fidelity_banner(verdicts)


def write_study_report(study: Path, out: Path) -> Path:
    """Write out/report.html (paper vs ours) and out/claims.json; return the report path."""
    res = evaluate(study, out)
    paper = load_paper(study)
    out.mkdir(parents=True, exist_ok=True)
    target = out / "report.html"
    atomic_write_text(target, render(res, paper, out))
    claims = [{"figure": c.figure, "claim": c.text, "holds": c.holds, "measured": c.measured}
              for c in res.claims]
    atomic_write_text(out / "claims.json", json.dumps(claims, indent=1))
    return target
