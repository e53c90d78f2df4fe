"""The tables a study's claims are computed from: what ``testbed study`` wrote, read back.

``testbed study`` writes ``out/<spec stem>/`` with one bundle per run.  `run_table` stacks
one metrics table (flows, timeseries, ping, events ...) over every complete run, with the
run's id and swept parameters as columns (``run_id``, ``param:<key path>``); the helpers
below turn those into the numbers the studies compare: a workload's throughput
(`workload_rates`: one value per run, the repetitions a claim's interval is made over;
`workload_rate`: their mean), the rate inside a time window (`window_rates`,
`window_rate`).  Folders and files are
read as untrusted input (`testbed.core.safefiles`: no symbolic link is followed).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.core import safefiles
from testbed.core.compat import tomllib
from testbed.core.errors import InputError
from testbed.results.bundle import check_format

SENT = ("flow", "connection")
DELIVERED = ("delivered", "connection")


def complete_runs(spec_out: Path) -> list[Path]:
    """The run folders of a spec's output folder whose metadata says complete."""
    runs: list[Path] = []
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
        check_format(meta, meta_file)  # a newer bundle is refused, not misread
        if meta.get("status") == "complete":
            runs.append(meta_file.parent)
    return runs


def _params(run: Path) -> dict[str, Any]:
    meta = json.loads(safefiles.read_text(run / "metadata.json"))  # checked by complete_runs
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
    for run in complete_runs(spec_out):
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


def numeric(s: pd.Series) -> pd.Series:
    """s as numbers (NaN where a value is not one)."""
    return pd.to_numeric(s, errors="coerce")


def select_runs(df: pd.DataFrame, run_filter: dict[str, Any] | None) -> pd.DataFrame | None:
    """Rows of the runs whose parameters match run_filter; None if a key is unknown."""
    for k, v in (run_filter or {}).items():
        if k not in df:
            return None
        df = df[df[k].astype(str) == str(v)]
    return df


def workload_rates(flows: pd.DataFrame, workload: str,
                   run_filter: dict[str, Any] | None = None) -> list[float]:
    """Throughput (bit/s) of one workload's flows, summed per run: one value per run.

    flows: `top_flows`; workload: its name; run_filter: {"param:key": value} to select
    runs.  A run's value is its one flow's ``throughput_bps`` (as `testbed query` reads
    it: for a transfer cut off or run without a size, what its receiver got, while it
    sent; docs/bundle.md "One FCT"), or for a workload of several flows in a run their
    bytes over the span from the first start to the last end.  [] when no run matches.
    """
    if flows.empty or "workload" not in flows:
        return []
    sel = select_runs(flows[flows["workload"] == workload], run_filter)
    if sel is None or sel.empty:
        return []

    def rate(g: pd.DataFrame) -> float:
        if len(g) == 1 and "throughput_bps" in g and pd.notna(g["throughput_bps"].iloc[0]):
            return float(numeric(g["throughput_bps"]).iloc[0])
        return float(numeric(g["bytes"]).sum() * 8
                     / max(numeric(g["end"]).max() - numeric(g["start"]).min(), 1e-9))
    per_run = sel.groupby("run_id").apply(rate, include_groups=False)
    return [float(v) for v in per_run]


def workload_rate(flows: pd.DataFrame, workload: str, run_filter: dict[str, Any] | None = None
                  ) -> float | None:
    """Mean over runs of `workload_rates` (bit/s); None when no run matches."""
    rates = workload_rates(flows, workload, run_filter)
    return sum(rates) / len(rates) if rates else None


def window_rates(spec_out: Path, t_from: float, t_to: float,
                run_filter: dict[str, Any] | None = None, kinds: tuple[str, ...] = SENT,
                table: pd.DataFrame | None = None, keys: set[str] | None = None
                ) -> list[float]:
    """Average rate (bit/s) in [t_from, t_to) seconds after the run's start, per run.

    Sums the goodput series of every top-level flow per run: one value for each run that
    matches run_filter (a run without data in the window counts as 0; [] when none does).
    kinds: the timeseries kinds to add up -- `SENT`: TCP/UDP flows' new data at the sender ("flow")
    and MPTCP connections ("connection"; their subflows are not added again); `DELIVERED`:
    TCP flows' bytes acknowledged by their receiver ("delivered") instead of "flow", except
    in runs analysed before that series existed, which count "flow".  table: the
    timeseries of spec_out if already loaded (`run_table`); keys: only these flows'
    series (flow ids, ``mptcp:<token>`` for a connection), e.g. one workload's.
    """
    ts = run_table(spec_out, "timeseries") if table is None else table
    if ts.empty:
        return []
    wanted = ts["kind"].isin(list(kinds))
    if "delivered" in kinds:
        has = ts.loc[ts["kind"] == "delivered", "run_id"].unique()
        wanted |= (ts["kind"] == "flow") & ~ts["run_id"].isin(has)
    if keys is not None:
        wanted &= ts["key"].isin(list(keys))
    sel = select_runs(ts[wanted], run_filter)
    if sel is None or sel.empty:
        return []
    t_rel = numeric(sel["t_rel"])
    sel = sel[(t_rel >= t_from - 1e-9) & (t_rel < t_to - 1e-9)]
    rate = numeric(sel["goodput_bps"]).fillna(numeric(sel["rate_bps"]))
    sel = sel.assign(_bits=rate * numeric(sel["bin_s"]))
    per_run = sel.groupby("run_id")["_bits"].sum() / (t_to - t_from)
    matching = select_runs(ts, run_filter)
    runs = set(matching["run_id"]) if matching is not None else set()
    per_run = per_run.reindex(sorted(runs), fill_value=0.0)
    return [float(v) for v in per_run]


def window_rate(spec_out: Path, t_from: float, t_to: float,
                run_filter: dict[str, Any] | None = None, kinds: tuple[str, ...] = SENT,
                table: pd.DataFrame | None = None) -> float | None:
    """Mean over runs of `window_rates` (bit/s); None when no run matches."""
    rates = window_rates(spec_out, t_from, t_to, run_filter, kinds, table)
    return sum(rates) / len(rates) if rates else None


def resolved_spec(spec_out: Path) -> dict[str, Any] | None:
    """The resolved spec.toml of the first complete run of a spec's output (None: no run)."""
    runs = complete_runs(spec_out)
    if not runs:
        return None
    spec = safefiles.file_in(runs[0], "spec.toml")
    return tomllib.loads(safefiles.read_text(spec)) if spec is not None else None
