"""P0's congestion-control part (Sect. 4.5-4.6, and RFC 6356's fairness goal): the
numbers behind its claims, tables and figure, from the ``cc_*`` specs' results.

* ``cc_fairness``: an MPTCP connection (2 subflows) and one TCP reno flow share one
  link; `fairness_shares` gives, per control, the MPTCP connection's share of what the
  two carried (one value per run; 0.5 is the fair share).
* ``cc_disjoint``: one MPTCP connection over two disjoint paths; `disjoint_use` gives
  its throughput over the sum of the paths' rates.
* ``cc_normal`` / ``cc_heavy``: the file's throughput over WiFi + 3G per control
  (`file_rates`), under heavy load from 1 s after the video starts.
"""

from __future__ import annotations

from pathlib import Path

import tomllib

from analysis.study_tables import (
    complete_runs,
    numeric,
    resolved_spec,
    run_table,
    top_flows,
    window_rates,
)
from testbed.core import safefiles
from testbed.core.errors import InputError
from testbed.core.units import parse_duration, parse_rate

COUPLED = ("lia", "olia", "balia", "wvegas")
ORDER = (*COUPLED, "cubic", "reno")


def run_ccs(spec_out: Path) -> dict[str, str]:
    """run id -> its ``transport.cc``, from each complete run's resolved spec (also when
    the control was set with ``--set`` rather than swept)."""
    out = {}
    for run in complete_runs(spec_out):
        f = safefiles.file_in(run, "spec.toml")
        try:
            spec = tomllib.loads(safefiles.read_text(f)) if f is not None else {}
        except (OSError, ValueError, InputError):
            continue
        cc = (spec.get("transport") or {}).get("cc", "cubic")
        out[run.name] = str(cc)
    return out


def _per_run_rates(spec_out: Path) -> dict[str, dict[str, dict[str, float]]]:
    """cc -> run id -> workload -> throughput (bit/s) of its top-level flows."""
    flows = top_flows(spec_out)
    out: dict[str, dict[str, dict[str, float]]] = {}
    if flows.empty:
        return out
    flows = flows.assign(_cc=flows["run_id"].map(run_ccs(spec_out)))
    for (cc, run, wl), g in flows.dropna(subset=["_cc"]).groupby(["_cc", "run_id",
                                                                  "workload"]):
        span = max(numeric(g["end"]).max() - numeric(g["start"]).min(), 1e-9)
        out.setdefault(str(cc), {}).setdefault(str(run), {})[str(wl)] = \
            float(numeric(g["bytes"]).sum() * 8 / span)
    return out


def ccs_in(per_cc: dict[str, object]) -> list[str]:
    """The controls present, in the study's order (others after, by name)."""
    return [c for c in ORDER if c in per_cc] + sorted(c for c in per_cc if c not in ORDER)


def fairness_shares(out: Path) -> dict[str, list[float]]:
    """cc -> the MPTCP connection's share of MPTCP + TCP throughput, one value per run."""
    shares: dict[str, list[float]] = {}
    for cc, runs in _per_run_rates(out / "cc_fairness").items():
        for rates in runs.values():
            mp, tcp = rates.get("mptcp"), rates.get("tcp")
            if mp is not None and tcp is not None and mp + tcp > 0:
                shares.setdefault(cc, []).append(mp / (mp + tcp))
    return shares


def path_capacity_bps(spec_out: Path) -> float | None:
    """The sum of the spec's path rates (bit/s), None when unknown."""
    spec = resolved_spec(spec_out)
    paths = ((spec or {}).get("topology") or {}).get("paths") or []
    rates = [parse_rate(p["bw"]) for p in paths if p.get("bw")]
    return float(sum(rates)) if rates and len(rates) == len(paths) else None


def disjoint_use(out: Path) -> dict[str, list[float]]:
    """cc -> the MPTCP connection's throughput over the paths' summed rate, per run."""
    spec_out = out / "cc_disjoint"
    cap = path_capacity_bps(spec_out)
    if not cap:
        return {}
    return {cc: [r["mptcp"] / cap for r in runs.values() if "mptcp" in r]
            for cc, runs in _per_run_rates(spec_out).items()}


def after_video(spec_out: Path) -> tuple[float, float] | None:
    """The heavy-load window of a spec's runs: from 1 s after its ``video`` workload
    starts to the end of the run (s on the run's clock); None without a video."""
    resolved = resolved_spec(spec_out) or {}
    starts = [parse_duration(w["start"]) for w in resolved.get("workload", [])
              if w.get("name") == "video" and "start" in w]
    if not starts or "duration" not in resolved:
        return None
    return starts[0] + 1.0, parse_duration(resolved["duration"])


def workload_window_rates(spec_out: Path, workload: str, window: tuple[float, float]
                          ) -> list[float]:
    """One workload's rate (bit/s) in window (`after_video`), one value per run that ran
    it: its top-level flows' new data (`analysis.study_tables.window_rates`)."""
    flows = top_flows(spec_out)
    if flows.empty or "workload" not in flows:
        return []
    ts = run_table(spec_out, "timeseries")
    out: list[float] = []
    for run, g in flows[flows["workload"] == workload].groupby("run_id"):
        out += window_rates(spec_out, *window, run_filter={"run_id": run}, table=ts,
                            keys=set(g["flow_id"].astype(str)))
    return out


def file_rates(out: Path, spec: str) -> dict[str, list[float]]:
    """cc -> the file's throughput (bit/s) per run: the whole run at normal load
    (``cc_normal``); from 1 s after the video starts to the end under heavy load."""
    spec_out = out / spec
    if spec == "cc_heavy":
        window = after_video(spec_out)
        if window is None:
            return {}
        ts = run_table(spec_out, "timeseries")
        rates: dict[str, list[float]] = {}
        for run, cc in run_ccs(spec_out).items():
            rates.setdefault(cc, []).extend(window_rates(
                spec_out, *window, run_filter={"run_id": run}, kinds=("connection",),
                table=ts))
        return rates
    return {cc: [r["file"] for r in runs.values() if "file" in r]
            for cc, runs in _per_run_rates(spec_out).items()}
