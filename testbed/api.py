"""The testbed from Python (notebooks, scripts): results as pandas, runs, figures.

Reading needs neither root nor kernel features::

    from testbed import api

    res = api.load("results/p0_wifi_3g-quick/paths")   # or several folders, or a study's
    res.runs                     # one row per run: the `runs` view of `testbed query`
    res.flows, res.timeseries    # ... and cwnd, ping, events, rtt: the other views,
                                 # every complete run stacked, run_id first
    api.throughput_figure(res.select("p0-paths-quick-302564ab0a-r1"))

The tables are those of ``testbed query`` (columns in docs/bundle.md), read through the
same code (`testbed.results.query`, `testbed.results.summary`), so a bundle a newer
testbed wrote is refused here too (`testbed.results.bundle.check_format`).  The figures
are the reports' (`analysis.plots`), returned as matplotlib Figures.

`run` (one spec: its sweep and repetitions) and `study` (every spec of a reproduced
study) run experiments as ``testbed run``/``testbed study`` do, with a callback told of
every run's start, phases and end (`RunProgress`).  They need root and the kernel
features ``testbed doctor`` checks, on this machine: unlike the CLI they never move into
``testbed vm`` (run the script there instead: ``testbed vm -- .venv/bin/python SCRIPT.py``).
docs/api.md has the examples.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.core import safefiles
from testbed.core.errors import InputError
from testbed.results.bundle import Bundle, bundles
from testbed.results.folders import why_no_bundles
from testbed.results.query import VIEWS

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from testbed.run.study import StudyOutcome
    from testbed.run.sweep import SweepReport

TABLES = ("runs", *VIEWS)
# the timeseries kinds (docs/bundle.md, column kind)
SERIES_KINDS = ("path", "subflow", "flow", "connection", "iface", "delivered")


@dataclass(frozen=True)
class Results:
    """The tables of one or more result folders, each a pandas DataFrame with run_id.

    runs: one row per bundle (any status); flows, timeseries, cwnd, ping, events, rtt: the
    metrics tables of the complete runs (empty, with their documented columns, when none
    has one); warnings: what was left out that a reader may expect (a folder whose
    metadata.json is a symbolic link, a broken run), one line each, as `testbed query`
    prints them.
    """

    runs: pd.DataFrame
    flows: pd.DataFrame
    timeseries: pd.DataFrame
    cwnd: pd.DataFrame
    ping: pd.DataFrame
    events: pd.DataFrame
    rtt: pd.DataFrame
    warnings: tuple[str, ...] = ()

    def table(self, name: str) -> pd.DataFrame:
        """The table called name (one of `TABLES`)."""
        if name not in TABLES:
            raise InputError(f"table {name!r}: use one of {', '.join(TABLES)}")
        return getattr(self, name)

    def select(self, *run_ids: str) -> Results:
        """The same tables with only the rows of these runs."""
        if any(not isinstance(r, str) for r in run_ids):
            raise InputError("select: give each run id as its own argument (select(a, b), "
                             "or select(*ids) for a list)")
        unknown = sorted(set(run_ids) - set(self.runs["run_id"]))
        if unknown:
            have = list(self.runs["run_id"])
            raise InputError(f"run {unknown[0]!r} is not loaded (runs: {', '.join(have[:5])}"
                             f"{', ...' if len(have) > 5 else ''})")
        return Results(**{t: _rows(self.table(t), run_ids) for t in TABLES},
                       warnings=self.warnings)


def _rows(df: pd.DataFrame, run_ids: Iterable[str]) -> pd.DataFrame:
    return df[df["run_id"].isin(list(run_ids))].reset_index(drop=True)


def load(*folders: str | Path) -> Results:
    """The tables of one or more result folders.

    folders: each the output folder of ``testbed run`` (one bundle per run), a study's
    output folder (``results/<study>-<variant>``: every spec folder in it) or one bundle.
    Raises `InputError` (one line) for a folder without bundles, a bundle this user may not
    read, or a run id found in two folders.
    """
    import pandas as pd

    from testbed.results.query import check_readable, left_out, view_tables
    from testbed.results.summary import run_row, runs_frame

    if not folders:
        raise InputError("load: name at least one results folder")
    if any(not isinstance(f, str | Path) for f in folders):
        raise InputError("load: give each folder as its own argument, a path (load(a, b), "
                         "or load(*folders) for a list)")
    runs, parts = [], {t: [] for t in VIEWS}
    warned: list[str] = []
    for out in (d for f in folders for d in _output_folders(Path(f))):
        if isinstance(out, Bundle):
            runs.append(pd.DataFrame([run_row(out)]))
            tables = _one_bundle(out)
            warned += left_out(out.root)
        else:
            check_readable(out)
            warned += left_out(out)
            runs.append(runs_frame(out))
            tables = {t: (a.to_pandas() if a is not None else None)
                      for t, a in view_tables(out).items()}
        for t, df in tables.items():
            if df is not None:
                parts[t].append(df)
    all_runs = pd.concat(runs, ignore_index=True)
    twice = all_runs["run_id"][all_runs["run_id"].duplicated()]
    if len(twice):
        paths = all_runs.loc[all_runs["run_id"] == twice.iloc[0], "path"]
        raise InputError(f"run {twice.iloc[0]} is in {' and '.join(map(str, paths))}; "
                         "load them separately")
    return Results(runs=all_runs, **{t: pd.concat(parts[t], ignore_index=True) if parts[t]
                                     else _empty(t) for t in VIEWS}, warnings=tuple(warned))


def _output_folders(path: Path) -> list[Path | Bundle]:
    """The folders holding bundles (or the bundle) that path stands for."""
    if not path.is_dir():
        raise InputError(f"{path}: " + ("a file, not a results folder; give the folder that "
                                       "holds the run folders" if path.exists()
                                       else "no such results folder"))
    if safefiles.check(path, path / "metadata.json") in (None, safefiles.SYMLINK):
        return [Bundle(path)]
    if bundles(path):
        return [path]
    specs = sorted(p for p in path.iterdir() if not p.name.startswith(("_", "."))
                   and safefiles.check(path, p, "dir") is None and bundles(p))
    if specs:
        return list(specs)
    why = why_no_bundles(path)
    if why is not None:
        raise InputError(f"{path}: no result bundle read here: {why}")
    raise InputError(f"{path}: no result bundles here (no <run-id>/metadata.json); give "
                     "the --out DIR of `testbed run` or `testbed study`, or one run's folder")


def _one_bundle(bundle: Bundle) -> dict[str, pd.DataFrame | None]:
    from testbed.results.bundle import COMPLETE
    from testbed.results.query import metrics_table

    if bundle.status() != COMPLETE:
        return {t: None for t in VIEWS}
    out: dict[str, pd.DataFrame | None] = {}
    for t in VIEWS:
        f = safefiles.file_in(bundle.root, f"metrics/{t}.parquet")
        out[t] = metrics_table(t, [(bundle.run_id, f)]).to_pandas() if f is not None \
            else None
    return out


def _empty(table: str) -> pd.DataFrame:
    """No rows, the documented columns (`testbed.results.columns`), run_id first."""
    import pandas as pd

    from testbed.results.columns import pandas_dtypes

    dtypes = {"run_id": "object", **pandas_dtypes(table, exclude=("run_id",))}
    return pd.DataFrame({c: pd.Series(dtype=d) for c, d in dtypes.items()})


# ---------------------------------------------------------------------------------------
# figures (analysis.plots), from loaded results


def _one_run(res: Results) -> tuple[str, Results]:
    ids = list(res.runs["run_id"])
    if len(ids) != 1:
        raise InputError(f"this figure shows one run and {len(ids)} are loaded: choose one "
                         "with results.select(run_id)")
    return ids[0], res


def throughput_figure(res: Results, kind: str = "path") -> Figure:
    """Rate vs time of one run, a line per path (kind: path, subflow, flow, connection,
    iface), schedule events as dashed lines; res: `load` of one run or `Results.select`."""
    from analysis import plots

    if kind not in SERIES_KINDS:
        raise InputError(f"kind {kind!r}: use one of {', '.join(SERIES_KINDS)}")
    run_id, res = _one_run(res)
    ts = res.timeseries
    if not (ts["kind"] == kind).any():  # a blank figure would say nothing
        have = sorted(set(ts["kind"].dropna().astype(str)))
        raise InputError(f"run {run_id} has no {kind!r} series (a fat-tree run has no paths, a "
                         "TCP run no subflows or connections); "
                         + (f"it has: {', '.join(have)}" if have else
                            "its timeseries table is empty (no captures analysed?)"))
    return plots.throughput_figure(ts, kind, res.events,
                                   title=f"Throughput per {kind}: {run_id}")


def cwnd_figure(res: Results) -> Figure:
    """Congestion window vs time of one run, a line per (sub)flow socket."""
    from analysis import plots

    run_id, _ = _one_run(res)
    if not len(res.cwnd):
        raise InputError(f"run {run_id} has no cwnd samples (its spec's sampler was off, or "
                         "no socket was open when it sampled)")
    return plots.cwnd_figure(res.cwnd)


def fct_cdf_figure(res: Results) -> Figure:
    """CDF of the flow completion times of the top-level flows of every loaded run."""
    from analysis import plots

    top = res.flows[res.flows["parent"].fillna("") == ""]
    if not top["fct_s"].notna().any():
        raise InputError("no loaded flow has a completion time (fct_s): a transfer run "
                         "without a size has none (docs/bundle.md, \"One FCT\"), and a run "
                         "not analysed has no flows")
    return plots.fct_cdf_figure(res.flows)


def sweep_figure(res: Results, param: str, metric: str,
                 policy: Sequence[str] | None = None) -> Figure:
    """A runs column (metric, e.g. ``throughput_bps_mean``) vs a swept parameter (param, e.g.
    ``"transport.cc"``), mean and Student t 95 % interval over repetitions: grouped bars
    for a categorical parameter, a line with a band for a numeric one, a bar colour / line
    per combination of the policy columns; runs not complete are left out and counted."""
    from analysis import plots

    for col in (param, metric, *(policy or ())):
        if col not in res.runs:
            raise InputError(f"{col!r} is not a column of the runs table "
                             f"(have {', '.join(map(str, res.runs.columns))})")
    import pandas as pd

    values = pd.to_numeric(res.runs[metric], errors="coerce")
    if values.isna().all() and res.runs[metric].notna().any():
        raise InputError(f"{metric!r} holds no number (e.g. {res.runs[metric].dropna().iloc[0]!r})"
                         "; give a numeric column of the runs table as the metric, e.g. "
                         "'throughput_bps_mean'")
    return plots.sweep_figure(res.runs, param, metric, list(policy) if policy else None)


# ---------------------------------------------------------------------------------------
# running (root and kernel features needed)


@dataclass(frozen=True)
class RunProgress:
    """What `run` and `study` tell their callback.

    event: ``begin`` (a run starts), ``phase`` (text: preflight, set-up, traffic, teardown,
    analysis) or ``end`` (text: its status, error: why it failed); run_id; index: the
    run's position in its sweep (1-based) of total.
    """

    event: str
    run_id: str
    index: int
    total: int
    text: str = ""
    error: str | None = None


@dataclass
class _Report:
    """A `testbed.run.sweep.Progress` that calls a `RunProgress` callback."""

    callback: Callable[[RunProgress], None]
    total: int = 0
    current: tuple[str, int] = ("", 0)
    seen: list[str] = field(default_factory=list)

    def start(self, total: int, skipped: int) -> None:
        self.total = total

    def begin(self, index: int, run_id: str) -> None:
        self.current = (run_id, index + 1)
        self.callback(RunProgress("begin", run_id, index + 1, self.total))

    def phase(self, text: str) -> None:
        self.callback(RunProgress("phase", *self.current, self.total, text))

    def end(self, run_id: str, status: str, wall_s: float, error: str | None) -> None:
        self.callback(RunProgress("end", run_id, self.current[1], self.total, status, error))

    def close(self) -> None:
        pass


def run(spec: str | Path, out: str | Path | None = None, overrides: Sequence[str] = (),
        progress: Callable[[RunProgress], None] | None = None, fail_fast: bool = False,
        fresh_networks: bool = False) -> SweepReport:
    """Run a spec (every sweep point and repetition) into out, as ``testbed run`` does:
    complete runs are skipped, failed ones recorded; return what the sweep did.

    spec: the TOML file; out: default ``results/<spec name>``; overrides: ``KEY=VALUE``
    strings (``--set``); progress: called with a `RunProgress` at every step.  Needs root
    and the kernel features of ``testbed doctor`` here; raises `InputError` for a bad spec.
    """
    from functools import partial

    from testbed.core.ownership import hand_over
    from testbed.run.execute import execute_run
    from testbed.run.preflight import check_kernel_support, check_networks
    from testbed.run.recovery import recover_bundle
    from testbed.run.reuse import NetworkKeeper
    from testbed.run.sweep import NoProgress, run_sweep
    from testbed.spec.sweep import override_labels, plan_runs

    started = time.time() - 1.0  # hand over only what this call made (`hand_over`)
    plans = plan_runs(Path(spec), list(overrides))
    labels = override_labels(list(overrides))
    check_networks(plans, str(spec), labels)  # every point's network, before any run
    target = Path(out) if out is not None else Path("results") / plans[0].spec.name
    check_kernel_support(plans, labels=labels)
    extra = {"command": f"testbed.api.run({str(spec)!r})", "spec_file": str(spec)}
    try:
        with NetworkKeeper(keep=not fresh_networks, state_dir=target) as keeper:
            return run_sweep(plans, target, partial(execute_run, keeper=keeper),
                             fail_fast=fail_fast, extra_meta=extra, recover=recover_bundle,
                             progress=_Report(progress) if progress else NoProgress())
    finally:
        hand_over(target, since=started)


def study(folder: str | Path, variant: str = "quick", out: str | Path | None = None,
          only: Sequence[str] | None = None, overrides: Sequence[str] = (),
          progress: Callable[[RunProgress], None] | None = None,
          reports: bool = True) -> StudyOutcome:
    """Run every spec of a reproduced study (``experiments/<study>``) as ``testbed study``
    does, then (reports) write each spec's report and the paper-vs-ours report.

    variant: quick | full; out: default ``results/<study>-<variant>``; only: spec file
    stems; progress: as for `run` (each spec's sweep counts its own runs).  Needs root and
    the kernel features of ``testbed doctor`` here.
    """
    from testbed.core.ownership import hand_over
    from testbed.run.study import default_out, run_study

    started = time.time() - 1.0  # hand over only what this call made (`hand_over`)
    where = Path(folder)
    target = Path(out) if out is not None else default_out(where, variant)
    try:
        return run_study(where, variant, target, list(only) if only else None,
                         reports=reports, overrides=list(overrides),
                         progress=_Report(progress) if progress else None)
    finally:
        hand_over(target, since=started)
