"""The ``testbed`` command line.

Each sub-command is a thin wrapper: it parses options, calls the library and turns
`InputError` / `MissingFeatureError` into one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from testbed import __version__
from testbed.errors import TestbedError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Multipath Testbed: emulate multipath and data-center networks "
                       "with real Linux transports.",
                  context_settings={"help_option_names": ["-h", "--help"]})

T = TypeVar("T")


def guarded(fn: Callable[[], T]) -> T:
    """Call fn; a deliberate testbed error becomes one line on stderr and its exit code."""
    try:
        return fn()
    except TestbedError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None


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
    from testbed import doctor as doc

    code = guarded(lambda: doc.main(as_json=as_json))
    raise typer.Exit(code)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def vm(ctx: typer.Context,
       kernel: Annotated[Path | None, typer.Option(help="Kernel image to boot "
                                                  "(default: newest /boot/vmlinuz-*).")] = None,
       memory: Annotated[str, typer.Option(help="VM memory, e.g. 2G.")] = "2G",
       cpus: Annotated[int, typer.Option(help="VM CPUs.")] = 2,
       kvm: Annotated[str, typer.Option(help="auto | on | off")] = "auto") -> None:
    """Run a command inside a VM booting the distribution kernel: testbed vm -- CMD ..."""
    from testbed import vm as vmmod

    cmd = list(ctx.args)
    code = guarded(lambda: vmmod.run_in_vm(cmd, kernel=kernel, memory=memory, cpus=cpus,
                                           kvm=kvm))
    raise typer.Exit(code)


__import__("testbed.runcli", fromlist=["register"]).register(app)  # testbed run / query
__import__("analysis.cli", fromlist=["register"]).register(app)  # analyze / report


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)


if __name__ == "__main__":
    main()
