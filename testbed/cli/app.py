"""The ``testbed`` command line.

Each sub-command is a thin wrapper: it parses options, calls the library and turns
`InputError` / `MissingFeatureError` into one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from testbed import __version__
from testbed.cli import helptext
from testbed.cli.common import guarded, hand_over_on_exit

helptext.install()  # flags without placeholders, one metavar style (see testbed.cli.helptext)

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Multipath Testbed: emulate multipath and data-center networks "
                       "with real Linux transports.",
                  context_settings={"help_option_names": ["-h", "--help"]})

def _version(value: bool) -> None:
    if value:
        typer.echo(f"testbed {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version,
                                                is_eager=True, help="Print the version.")]
          = False) -> None:
    """Multipath Testbed."""


@app.command()
def doctor(as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
           = False) -> None:
    """Check that this machine can run experiments natively; name the remedy for each gap."""
    from testbed.machine import doctor as doc

    code = guarded(lambda: doc.main(as_json=as_json))
    raise typer.Exit(code)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
             options_metavar="[OPTIONS] -- CMD...")
def vm(ctx: typer.Context,
       kernel: Annotated[Path | None, typer.Option(metavar="FILE", help="Kernel image to boot "
                                                  "(default: newest /boot/vmlinuz-*).")] = None,
       memory: Annotated[str, typer.Option(metavar="SIZE", help="VM memory, e.g. 2G.")] = "2G",
       cpus: Annotated[int, typer.Option(metavar="N", help="VM CPUs.")] = 2,
       kvm: Annotated[str, typer.Option(
           metavar="auto|on|off", help="Use KVM: auto (when a probe boot works), on, off.")
       ] = "auto") -> None:
    """Run a command inside a VM booting the distribution kernel: testbed vm -- CMD ..."""
    from testbed.machine import vm as vmmod

    cmd = list(ctx.args)
    code = guarded(lambda: vmmod.run_in_vm(cmd, kernel=kernel, memory=memory, cpus=cpus,
                                           kvm=kvm))
    raise typer.Exit(code)


run_cli = __import__("testbed.cli.run", fromlist=["register"])
run_cli.register(app)  # testbed run / query
__import__("testbed.cli.analyze", fromlist=["register"]).register(app)  # analyze / report
__import__("testbed.cli.grade", fromlist=["register"]).register(app)  # check / grade / verify


@app.command()
def study(ctx: typer.Context,
          directories: Annotated[list[Path], typer.Argument(
              metavar="STUDY",
              help="Study folders, e.g. experiments/p0_wifi_3g (several: one VM boot).")],
          variant: Annotated[str, typer.Option(metavar="quick|full",
                                                help="Which specs of the study to run.")] = "quick",
          out: Annotated[Path | None, typer.Option(
              "--out", "-o", metavar="DIR",
              help="Output folder (default results/<study>-<variant>); with several studies, "
                   "the folder that gets one <study>-<variant> each.")] = None,
          only: Annotated[list[str] | None, typer.Option(
              metavar="SPEC_NAME",
              help="Run only this spec (file stem); repeatable; one study only.")] = None,
          fail_fast: Annotated[bool, typer.Option("--fail-fast",
                                                  help="Stop at the first failed run.")] = False,
          no_vm: Annotated[bool, typer.Option("--no-vm", help="Never re-run inside "
                                              "`testbed vm`.")] = False,
          report_only: Annotated[bool, typer.Option(
              "--report-only", help="Only (re)write the reports of finished runs.")] = False,
          no_report: Annotated[bool, typer.Option(
              "--no-report", help="Run only; write the reports later with --report-only.")
          ] = False,
          fresh_networks: Annotated[bool, typer.Option(
              "--fresh-networks", help="Build a network for every run (default: "
              "consecutive TCP runs on the same topology without a schedule share one).")
          ] = False,
          set_: Annotated[list[str] | None, typer.Option(
              "--set", "-s", metavar="KEY=VALUE",
              help="Override a key in every spec of the study, e.g. --set "
                   "transport.cc=reno (repeatable), as `testbed run` does.")] = None,
          dry_run: Annotated[bool, typer.Option(
              "--dry-run", help="Print each spec's runs and its first run's commands; "
                                "run nothing.")] = False,
          executor: run_cli.ExecutorOpt = "local",
          address: run_cli.AddressOpt = None,
          retries: run_cli.RetriesOpt = 2,
          defer_analysis: Annotated[bool, typer.Option(
              "--defer-analysis", hidden=True, help="Leave each run's analysis to a later "
              "--report-only (what the host does for runs inside the VM).")] = False,
          ) -> None:
    """Run every spec of reproduced studies and write their paper-vs-ours reports."""
    from testbed.run import study as st

    targets = st.study_outputs(directories, variant, out)
    for target in targets:
        if target.exists() and not target.is_dir():
            typer.echo(f"error: --out {target}: a file, not a folder; give a folder",
                       err=True)
            raise typer.Exit(2)
    if not dry_run:
        hand_over_on_exit(ctx, *targets)  # under sudo: the results are the user's
    if only and len(directories) > 1:
        typer.echo("error: --only selects specs of one study; give one study folder with it",
                   err=True)
        raise typer.Exit(2)
    if report_only:
        for d, target in zip(directories, targets, strict=True):
            path = guarded(lambda d=d, target=target: st.write_study_report(d, target))
            typer.echo(f"report: {path}")
        raise typer.Exit(0)
    from testbed.spec.sweep import override_labels

    overrides = list(set_ or [])
    # every spec valid, with the overrides, and the paper.toml the report will read,
    # before anything else is said or started
    for d in directories:
        guarded(lambda d=d: st.check_study_paper(d))
    planned = [guarded(lambda d=d: st.plan_study(d, variant, only, overrides))
               for d in directories]
    guarded(lambda: run_cli.check_executor(executor, address, retries))
    if dry_run:
        from testbed.cli.run import dry_run_kernel, print_dry_run

        kernel = guarded(lambda: dry_run_kernel(no_vm or st.native_ok(passive=True)))
        labels = override_labels(overrides)
        for d, target, study_plans in zip(directories, targets, planned, strict=True):
            for spec, plans in study_plans.items():
                typer.echo(f"\n== {d.name} ({variant}): {spec.stem}")
                guarded(lambda plans=plans, spec=spec, target=target: print_dry_run(
                    plans, target / spec.stem, target=kernel, labels=labels))
        raise typer.Exit(0)
    remote = guarded(lambda: run_cli.make_executor(executor, address, retries))
    if remote is None and not no_vm and not guarded(st.native_ok):
        from testbed.run.preflight import check_before_vm

        # what the VM kernel lacks is refused before it boots
        guarded(lambda: check_before_vm([p for sp in planned for ps in sp.values() for p in ps],
                                        override_labels(overrides)))
        typer.echo("this machine cannot run experiments natively (see `testbed doctor`); "
                   "running the studies inside `testbed vm`, then writing the reports here",
                   err=True)
        from testbed.machine import vm as vmmod

        argv = st.in_vm_argv(directories, variant, out, only, fail_fast, fresh_networks,
                             overrides)
        rc = guarded(lambda: vmmod.run_in_vm(argv, memory="3G", outputs=targets))
        for d, target in zip(directories, targets, strict=True):
            if target.is_dir():
                bad = guarded(lambda target=target: st.finish_analysis(target))
                for key, err in bad.items():
                    typer.echo(f"  failed in {d.name}/{key}: {err}", err=True)
                rc = rc or (1 if bad else 0)
                path = guarded(lambda d=d, target=target: st.write_study_report(d, target))
                typer.echo(f"report: {path}")
        raise typer.Exit(rc)
    failed = False
    for d, target, study_plans in zip(directories, targets, planned, strict=True):
        try:
            outcome = guarded(lambda d=d, target=target, study_plans=study_plans: st.run_study(
                d, variant, target, only, fail_fast, reports=not no_report,
                fresh_networks=fresh_networks, analyze=not defer_analysis,
                overrides=overrides, executor=remote, planned=study_plans))
        except KeyboardInterrupt:
            typer.echo(f"interrupted: finished runs are kept in {target}; run the same "
                       "command again to resume", err=True)
            raise typer.Exit(130) from None
        for name, err in outcome.failed.items():
            typer.echo(f"  failed in {d.name}/{name}: {err}", err=True)
            failed = True
        if outcome.report is not None:
            typer.echo(f"report: {outcome.report}")
        if failed and fail_fast:
            break
    raise typer.Exit(1 if failed else 0)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)


if __name__ == "__main__":
    main()
