"""The ``testbed run`` and ``testbed query`` commands (registered on the main typer app).

``testbed run SPEC [--out DIR] [--set KEY=VALUE]... [--dry-run] [--fail-fast] [--no-vm]
[--fresh-networks] [--executor local|ray [--address ADDR] [--retries N]]`` expands the
spec's sweep and repetitions, skips runs whose bundle is already complete, and runs the
rest one after the other with a progress bar; consecutive runs that may share a network do
(`testbed.run.reuse`). When this machine cannot run experiments natively (see ``testbed
doctor``) it re-runs itself inside ``testbed vm``.  With ``--executor ray`` the runs go to
the nodes of a Ray cluster instead and their bundles come back here (docs/cluster.md).

``testbed query DIR "SQL" [--csv | --json]`` runs DuckDB SQL over the bundles in DIR.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from testbed.cli.common import hand_over_on_exit
from testbed.core.errors import InputError, TestbedError, error_lines

if TYPE_CHECKING:
    from testbed.run.preflight import KernelTarget
    from testbed.run.sweep import Executor

EXECUTORS = ("local", "ray")
ExecutorOpt = Annotated[str, typer.Option(
    "--executor", metavar="local|ray",
    help="Where the runs happen: local (here, one after the other) or ray (one Ray task "
         "per run on the nodes of a Ray cluster; docs/cluster.md).")]
AddressOpt = Annotated[str | None, typer.Option(
    "--address", metavar="ADDR",
    help="With --executor ray: the Ray cluster's address, e.g. 10.0.0.1:6379 (default: "
         "RAY_ADDRESS, or the cluster started on this machine).")]
RetriesOpt = Annotated[int, typer.Option(
    "--retries", metavar="N",
    help="With --executor ray: how often a run that failed because of its node (or whose "
         "node died) is sent again, to another node where there is one.")]


def make_executor(executor: str, address: str | None, retries: int) -> Executor | None:
    """The sweep's `Executor` for ``--executor`` (None: local, the default loop); raises
    `InputError` for an unknown executor and `MissingFeatureError` without Ray."""
    check_executor(executor, address, retries)
    if executor == "local":
        return None
    from testbed.run.cluster.executor import RayExecutor, import_ray

    import_ray()  # says how to get Ray before anything else happens
    ex = RayExecutor(address=address, retries=retries)
    ex.join()  # ... and that its cluster answers and can run runs, before any folder is made
    return ex


def check_executor(executor: str, address: str | None, retries: int) -> None:
    """Raise `InputError` for executor options a run refuses (a dry run checks them too,
    without connecting to anything)."""
    if executor not in EXECUTORS:
        raise InputError(f"--executor {executor!r}: use one of {', '.join(EXECUTORS)}")
    if address is not None and executor != "ray":
        raise InputError("--address names a Ray cluster; use it with --executor ray")
    if retries < 0:
        raise InputError(f"--retries {retries}: use 0 or more")


def register(app: typer.Typer) -> None:
    """Add the ``run`` and ``query`` sub-commands to app."""
    app.command("run")(run_command)
    app.command("query")(query_command)


def _fail(exc: TestbedError) -> typer.Exit:
    for line in error_lines(exc):
        typer.echo(line, err=True)
    return typer.Exit(exc.exit_code)


def run_command(
    ctx: typer.Context,
    spec: Annotated[Path, typer.Argument(metavar="SPEC", help="The experiment spec (TOML).",
                                            show_default=False)],
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", metavar="DIR",
        help="Output directory (default: results/<spec name>).")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", "-s", metavar="KEY=VALUE",
        help="Override a spec key, e.g. --set transport.cc=reno (repeatable).")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the runs and the first run's commands; run nothing.")] = False,
    fail_fast: Annotated[bool, typer.Option(
        "--fail-fast", help="Stop at the first failed run.")] = False,
    no_vm: Annotated[bool, typer.Option(
        "--no-vm", help="Never re-run inside `testbed vm`, even when doctor says native "
                        "runs are impossible.")] = False,
    fresh_networks: Annotated[bool, typer.Option(
        "--fresh-networks", help="Build a network for every run (default: consecutive TCP "
                                 "runs on the same topology without a schedule share "
                                 "one).")] = False,
    executor: ExecutorOpt = "local",
    address: AddressOpt = None,
    retries: RetriesOpt = 2,
) -> None:
    """Run an experiment spec (its sweep and repetitions) into result bundles."""
    from testbed.run.preflight import check_networks
    from testbed.spec.sweep import override_labels, plan_runs

    overrides = list(set_ or [])
    try:
        plans = plan_runs(spec, overrides)
        check_networks(plans, str(spec), override_labels(overrides))  # before any run
        check_executor(executor, address, retries)
        remote = None if dry_run else make_executor(executor, address, retries)
    except TestbedError as exc:
        raise _fail(exc) from None
    out_dir = out if out is not None else Path("results") / plans[0].spec.name
    if out_dir.exists() and not out_dir.is_dir():
        raise _fail(InputError(f"--out {out_dir}: a file, not a folder; give a folder (new "
                               "or one a sweep of this spec wrote)"))
    if not dry_run:
        hand_over_on_exit(ctx, out_dir)  # under sudo: the results are the user's

    if dry_run:
        try:
            target = dry_run_kernel(no_vm or _native_ok(passive=True))
            print_dry_run(plans, out_dir, keep=not fresh_networks, target=target,
                          labels=override_labels(overrides))
        except TestbedError as exc:
            raise _fail(exc) from None
        raise typer.Exit(0)

    if remote is not None:  # the nodes check themselves; this machine only gathers
        raise typer.Exit(_run_sweep(plans, out_dir, fail_fast, spec, overrides,
                                    fresh_networks, remote))
    if not no_vm and not _native_ok():
        from testbed.run.preflight import check_before_vm

        try:  # what the VM kernel lacks is refused before it boots
            check_before_vm(plans, override_labels(overrides))
        except TestbedError as exc:
            raise _fail(exc) from None
        argv = _self_argv(spec, out_dir, overrides, fail_fast, fresh_networks)
        typer.echo("this machine cannot run experiments natively (see `testbed doctor`); "
                   "re-running inside `testbed vm`", err=True)
        from testbed.machine import vm

        try:
            code = vm.run_in_vm(argv, outputs=[out_dir])
        except TestbedError as exc:
            raise _fail(exc) from None
        if (out_dir / "summary.parquet").is_file():  # the last line says where, truly
            typer.echo(f"results in {out_dir} (summary.parquet)", err=True)
        raise typer.Exit(code)

    raise typer.Exit(_run_sweep(plans, out_dir, fail_fast, spec, overrides, fresh_networks))


def dry_run_kernel(native: bool) -> KernelTarget:
    """The kernel a dry run checks the specs against (`testbed.run.preflight.KernelTarget`):
    this machine's when the runs would execute here (native: the real run's decision),
    else the ``testbed vm`` kernel's record.  Its line goes to stderr."""
    from testbed.run.preflight import kernel_target

    target = kernel_target(in_vm=not native)
    typer.echo(target.line, err=True)
    return target


def _native_ok(passive: bool = False) -> bool:
    """Whether doctor says this machine can run experiments here (root, netem, OVS, ...).
    passive: ask without loading or starting anything (a dry run)."""
    import os

    if os.environ.get("TESTBED_IN_VM") == "1":
        return True
    from testbed.machine import doctor

    return bool(doctor.can_run_natively(passive))


def _self_argv(spec: Path, out: Path, overrides: list[str], fail_fast: bool,
               fresh_networks: bool = False) -> list[str]:
    """The command that re-runs this very ``testbed run`` (inside the VM)."""
    exe = Path(sys.prefix) / "bin" / "testbed"
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "testbed.cli"]
    argv += ["run", str(spec.resolve()), "--out", str(out.resolve()), "--no-vm"]
    for o in overrides:
        argv += ["--set", o]
    if fail_fast:
        argv.append("--fail-fast")
    if fresh_networks:
        argv.append("--fresh-networks")
    return argv


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C while the sweep runs (clean up, mark interrupted)."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_sweep(plans: list[Any], out: Path, fail_fast: bool, spec: Path,
               overrides: list[str], fresh_networks: bool = False,
               executor: Executor | None = None) -> int:
    from functools import partial

    from testbed.core.progress import SweepProgress
    from testbed.run.execute import execute_run
    from testbed.run.preflight import check_kernel_support
    from testbed.run.recovery import recover_bundle
    from testbed.run.reuse import NetworkKeeper
    from testbed.run.sweep import run_sweep
    from testbed.spec.sweep import override_labels

    sets = [arg for o in overrides for arg in ("--set", o)]
    extra = {"command": shlex.join(["testbed", "run", str(spec), "--out", str(out), *sets]),
             "spec_file": str(spec)}
    progress = SweepProgress()
    try:
        # an unknown CC or scheduler stops here, not after every run failed (on a cluster,
        # each node checks its own kernel)
        if executor is None:
            check_kernel_support(plans, labels=override_labels(overrides))
    except TestbedError as exc:
        for line in error_lines(exc):
            typer.echo(line, err=True)
        return exc.exit_code
    try:
        with _sigterm_as_interrupt(), NetworkKeeper(
                keep=not fresh_networks, state_dir=out) as keeper:
            report = run_sweep(plans, out, executor or partial(execute_run, keeper=keeper),
                               fail_fast=fail_fast, progress=progress, extra_meta=extra,
                               recover=recover_bundle)
    except KeyboardInterrupt:
        typer.echo(f"interrupted: finished runs are kept in {out}; run the same command "
                   "again to resume", err=True)
        return 130
    except TestbedError as exc:
        for line in error_lines(exc):
            typer.echo(line, err=True)
        typer.echo(f"stopped; finished runs are kept in {out}", err=True)
        return exc.exit_code
    failed = len(report.failed)
    typer.echo(f"{report.complete} complete, {failed} failed, {report.skipped} already "
               f"complete; results in {out} (summary.parquet)", err=True)
    for run_id, error in report.failed:
        typer.echo(f"  failed {run_id}: {error}", err=True)
    return 1 if failed else 0


def print_dry_run(plans: list[Any], out: Path, keep: bool = True,
                  target: KernelTarget | None = None,
                  labels: dict[str, str] | None = None) -> None:
    """Check plans against the target kernel, then print their runs (a table) and the
    first run's commands as a shell script.

    plans: `RunPlan`s of one spec; out: the folder the runs would go to; keep: False
    with ``--fresh-networks`` (the run stops its own network); target: the
    `testbed.run.preflight.KernelTarget` to check against (None or no facts: not
    checked); labels: key path -> ``--set KEY`` (`testbed.spec.sweep.override_labels`).
    Raises `UnsupportedError` for a congestion control or scheduler the kernel lacks.
    """
    from rich.console import Console
    from rich.table import Table

    from testbed.run.dryrun import dry_run_commands
    from testbed.run.preflight import check_plans
    from testbed.spec.sweep import value_name

    facts = target.facts if target is not None else None
    if facts is not None:
        check_plans(plans, facts, labels)

    console = Console(highlight=False, soft_wrap=True)
    table = Table(title=f"{len(plans)} run(s) into {out}", title_justify="left")
    for col in ("#", "run id", "rep", "seed"):
        table.add_column(col)
    keys = list(plans[0].params)
    for k in keys:
        table.add_column(k)
    for p in plans:
        table.add_row(str(p.index + 1), p.run_id, str(p.repetition), str(p.seed),
                      *(value_name(p.params[k]) for k in keys))
    console.print(table)
    runner = dry_run_commands(plans[0], out / plans[0].run_id, keep=keep, kernel=facts)
    if not runner.transcript.entries and ":" in str(plans[0].spec.topology.kind):
        console.print(f"\ncommands not listed: topology {plans[0].spec.topology.kind} is "
                      "code, which only a real run imports and builds (as root)")
        return
    console.print(f"\ncommands of the first run ({plans[0].run_id}), in order:")
    console.out(runner.transcript.as_shell(), highlight=False)


def query_command(
    directory: Annotated[Path, typer.Argument(metavar="DIR",
                                              help="Output directory of `testbed run`, or "
                                                   "one run's bundle.")],
    sql: Annotated[str, typer.Argument(metavar="SQL", help="DuckDB SQL over the views runs, flows, "
                                            "timeseries, cwnd, ping, events, rtt "
                                            "(docs/bundle.md).")],
    csv: Annotated[bool, typer.Option("--csv", help="Print CSV instead of a table.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
) -> None:
    """Query result bundles with SQL (DuckDB)."""
    from testbed.results.query import fits, left_out, render_records, render_table, run_query

    if csv and as_json:
        typer.echo("error: --csv and --json: give one of them", err=True)
        raise typer.Exit(2)
    try:
        df = run_query(directory, sql)
    except TestbedError as exc:
        raise _fail(exc) from None
    for line in left_out(directory):
        typer.echo(f"warning: {line}", err=True)
    if csv:
        sys.stdout.write(df.to_csv(index=False))
    elif as_json:
        sys.stdout.write(df.to_json(orient="records", lines=True, date_format="iso"))
    else:
        from rich.console import Console

        console = Console(highlight=False)
        # too many columns for the terminal: one row below the other, not empty cells
        console.print(render_table(df) if fits(df, console.width) else render_records(df))
