"""A study: every spec of one reproduced paper, run together (``testbed study``).

A study folder (``experiments/p0_wifi_3g/``) holds ``quick/*.toml`` and ``full/*.toml``
(one spec per figure or table, same file names in both variants), ``paper.toml`` (the
paper's numbers) and a README.  ``testbed study DIR --variant quick --out OUT`` runs each
spec of the variant into ``OUT/<spec file stem>/`` (resumable, like ``testbed run``),
writes each spec's report, then the study report ``OUT/report.html`` that puts the
paper's numbers next to ours.  When this machine cannot run experiments natively, the
whole study runs inside one ``testbed vm`` (one boot, not one per spec) and the runs'
analysis and the reports happen here afterwards (software emulation makes them ~10x
slower inside; metadata says ``analysis = "host"`` for such runs).
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.core.errors import InputError, TestbedError

if TYPE_CHECKING:
    from testbed.run.sweep import Executor, Progress

VARIANTS = ("quick", "full")


@dataclass
class StudyOutcome:
    """What a study run did: per spec, its output dir and whether every run completed."""

    out: Path
    specs: dict[str, Path] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    report: Path | None = None


def study_specs(study: Path, variant: str) -> list[Path]:
    """The spec files of a study variant, in name order.

    study: the study folder; variant: "quick" or "full".
    """
    if variant not in VARIANTS:
        raise InputError(f"--variant {variant!r}: use one of {', '.join(VARIANTS)}")
    if not study.is_dir():
        raise InputError(f"{study}: no such study folder (e.g. experiments/p0_wifi_3g)")
    specs = sorted((study / variant).glob("*.toml"))
    if not specs:
        raise InputError(f"{study}: no {variant}/*.toml specs in this folder")
    return specs


def default_out(study: Path, variant: str) -> Path:
    """results/<study folder name>-<variant>."""
    return Path("results") / f"{study.resolve().name}-{variant}"


def study_outputs(studies: list[Path], variant: str, out: Path | None) -> list[Path]:
    """Where each study's results go: with one study, out (default
    ``results/<study>-<variant>``); with several, ``<out or results>/<study>-<variant>``."""
    if len(studies) == 1:
        return [out or default_out(studies[0], variant)]
    base = out or Path("results")
    return [base / f"{s.resolve().name}-{variant}" for s in studies]


def check_study_paper(study: Path) -> None:
    """Refuse (`InputError`, one line) a paper.toml the study's report would refuse after
    the last run (`analysis.study_report.check_paper`); a study without one is left to
    its report."""
    paper = study / "paper.toml"
    if paper.exists() or paper.is_symlink():
        from analysis.study_report import check_paper

        check_paper(study)


def plan_study(study: Path, variant: str, only: list[str] | None = None,
               overrides: list[str] | None = None) -> dict[Path, list[Any]]:
    """Every spec of the study variant (or those in only) -> its validated runs.

    study: the study folder; variant: quick | full; only: spec stems (default all);
    overrides: ``KEY=VALUE`` strings applied to every spec (``--set``).
    """
    from testbed.spec.sweep import override_labels, plan_runs

    specs = study_specs(study, variant)
    if only:
        unknown = sorted(set(only) - {s.stem for s in specs})
        if unknown:
            raise InputError(f"--only {', '.join(unknown)}: not a spec of {study}/{variant} "
                             f"(have {', '.join(s.stem for s in specs)})")
        specs = [s for s in specs if s.stem in only]
    from testbed.run.preflight import check_networks

    planned = {spec: plan_runs(spec, overrides or []) for spec in specs}
    for spec, plans in planned.items():  # every point's network, before anything runs
        check_networks(plans, str(spec), override_labels(overrides or []))
    return planned


def run_study(study: Path, variant: str = "quick", out: Path | None = None,
              only: list[str] | None = None, fail_fast: bool = False,
              reports: bool = True, fresh_networks: bool = False,
              analyze: bool = True, overrides: list[str] | None = None,
              progress: Progress | None = None,
              executor: Executor | None = None,
              planned: dict[Path, list[Any]] | None = None) -> StudyOutcome:
    """Run every spec of the study variant, then write the reports.

    study: the study folder; variant: quick | full; out: output folder;
    only: spec stems to run (default all); fail_fast: stop at the first failed run;
    reports: write the reports (off inside the VM: the host writes them afterwards,
    where plotting is 20x faster than under software emulation); fresh_networks: build a
    network for every run (default: consecutive runs that may share one do, across the
    study's specs; see `testbed.run.reuse`); analyze: False leaves each run's analysis to
    `finish_analysis` (inside the VM: the host does it afterwards, ~10x faster);
    overrides: ``--set KEY=VALUE`` strings applied to every spec; progress: where each
    spec's sweep reports (default: a progress bar per spec, `SweepProgress`); executor:
    where the runs happen (default: here, one after the other; a
    `testbed.run.cluster.executor.RayExecutor` sends them to a Ray cluster's nodes, which
    check their own kernels); planned: what `plan_study` returned for these arguments,
    when the caller has it already (planned here otherwise).
    """
    from functools import partial

    from testbed.core.progress import SweepProgress
    from testbed.run.execute import execute_run
    from testbed.run.preflight import check_kernel_support
    from testbed.run.recovery import recover_bundle
    from testbed.run.reuse import NetworkKeeper
    from testbed.run.sweep import run_sweep
    from testbed.spec.sweep import override_labels

    out = out or default_out(study, variant)
    outcome = StudyOutcome(out=out)
    # validate every spec before running anything: a typo in the last one should not
    # surface after twenty minutes of runs
    plans = planned if planned is not None else plan_study(study, variant, only, overrides)
    if executor is None:
        check_kernel_support([p for ps in plans.values() for p in ps],
                             labels=override_labels(overrides or []))
    sets = "".join(f" --set {shlex.quote(o)}" for o in overrides or [])
    with NetworkKeeper(keep=not fresh_networks, state_dir=out) as keeper:
        execute = executor or partial(execute_run, keeper=keeper, analyze=analyze)
        for i, (spec, spec_plans) in enumerate(plans.items(), 1):
            spec_out = out / spec.stem
            outcome.specs[spec.stem] = spec_out
            print(f"study {study.name} ({variant}): spec {i}/{len(plans)} {spec.stem}, "
                  f"{len(spec_plans)} run(s) -> {spec_out}", file=sys.stderr, flush=True)
            extra = {"command": f"testbed study {study} --variant {variant}{sets}",
                     "spec_file": str(spec), "study": study.name, "variant": variant}
            report = run_sweep(spec_plans, spec_out, execute, fail_fast=fail_fast,
                               progress=progress or SweepProgress(), extra_meta=extra,
                               recover=recover_bundle)
            if report.failed:
                outcome.failed[spec.stem] = "; ".join(f"{rid}: {err}"
                                                      for rid, err in report.failed)
    if reports:
        outcome.report = write_study_report(study, out)
    return outcome


def spec_outputs(out: Path) -> list[Path]:
    """The spec folders of a study's output folder (those with a summary.parquet)."""
    return sorted(p for p in out.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))
                  and (p / "summary.parquet").exists())


def finish_analysis(out: Path) -> dict[str, str]:
    """Analyse the runs of a study whose analysis was deferred (done inside the VM);
    return {"<spec>/<run id>": error} for those that failed (now marked failed)."""
    from testbed.run.execute import analyze_run
    from testbed.run.sweep import finish_deferred

    failed: dict[str, str] = {}
    if not out.is_dir():
        return failed
    for spec_out in spec_outputs(out):
        def say(line: str, spec: str = spec_out.name) -> None:
            print(f"{out.name}/{spec}: {line}", file=sys.stderr, flush=True)
        for run_id, err in finish_deferred(spec_out, analyze_run, progress=say):
            failed[f"{spec_out.name}/{run_id}"] = err
    return failed


def write_study_report(study: Path, out: Path) -> Path:
    """Each spec's report plus the study's paper-vs-ours report; returns its path.
    Runs whose analysis was deferred are analysed first."""
    from analysis.report import write_report
    from analysis.study_report import write_study_report as write_comparison

    if not out.is_dir():
        raise InputError(f"{out}: no study results here; run `testbed study {study}` first")
    _check_is_output_of(study, out)
    for key, err in finish_analysis(out).items():
        print(f"  failed in {study.name}/{key}: {err}", file=sys.stderr)
    for spec_out in spec_outputs(out):
        try:
            write_report(spec_out)
        except TestbedError as exc:
            print(f"report for {spec_out.name} skipped: {exc}", file=sys.stderr)
    return write_comparison(study, out)


def _check_is_output_of(study: Path, out: Path) -> None:
    """Raise `InputError` when out holds spec folders, none of them this study's (another
    study's output, or one spec's folder): its report would be written over with an empty
    one."""
    found = [p.name for p in spec_outputs(out)]
    mine = {p.stem for v in VARIANTS if (study / v).is_dir() for p in (study / v).glob("*.toml")}
    if found and not mine & set(found):
        raise InputError(f"{out}: holds the runs of {', '.join(found[:3])}"
                         f"{', ...' if len(found) > 3 else ''}, none of study {study.name}'s "
                         f"specs; give the --out of `testbed study {study}`")
    if not found and (out / "summary.parquet").exists():
        raise InputError(f"{out}: one spec's results (summary.parquet), not a study's output "
                         f"folder; give the --out of `testbed study {study}`")


def in_vm_argv(studies: list[Path], variant: str, out: Path | None,
               only: list[str] | None, fail_fast: bool,
               fresh_networks: bool = False, overrides: list[str] | None = None) -> list[str]:
    """The command that re-runs this very ``testbed study`` inside the VM, without the
    analysis and the reports (the caller does both on this machine afterwards)."""
    exe = Path(sys.prefix) / "bin" / "testbed"
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "testbed.cli"]
    argv += ["study", *(str(s.resolve()) for s in studies), "--variant", variant,
             "--no-vm", "--no-report", "--defer-analysis"]
    # the same folders as `study_outputs` here, made absolute for the VM
    base = out or (Path("results") if len(studies) > 1 else default_out(studies[0], variant))
    argv += ["--out", str(base.resolve())]
    for name in only or []:
        argv += ["--only", name]
    if fail_fast:
        argv.append("--fail-fast")
    if fresh_networks:
        argv.append("--fresh-networks")
    for o in overrides or []:
        argv += ["--set", o]
    return argv


def native_ok(passive: bool = False) -> bool:
    """Whether experiments can run here (inside the testbed VM they always can).
    passive: ask without loading or starting anything (a dry run)."""
    if os.environ.get("TESTBED_IN_VM") == "1":
        return True
    from testbed.machine import doctor

    return doctor.can_run_natively(passive)
