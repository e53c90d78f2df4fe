"""``testbed analyze``, ``report`` and ``compare``: `register(app)` adds them to the typer app."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from analysis.pcap import DEFAULT_CHUNK_BYTES
from testbed.cli.common import guarded, hand_over_on_exit

TABLE_COLUMNS = [("flow_id", "flow"), ("capture", "capture"), ("packets", "pkts"),
                 ("bytes", "bytes"), ("fct_s", "FCT s"), ("throughput_bps", "Mbit/s"),
                 ("retransmissions", "retx"), ("reordered_packets", "reord"),
                 ("rtt_ms_median", "RTT ms")]


def _fmt(col: str, v: object) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if col == "throughput_bps":
        return f"{float(v) / 1e6:.3f}"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _refuse_a_bundles_folder(out: Path) -> None:
    """Raise `InputError` when out is a run bundle or inside one: loose tables written
    there replace the bundle's own (made with its interfaces map and samples) and break
    its manifest."""
    from testbed.core.errors import InputError

    here = out.resolve()
    for p in [here, *here.parents]:
        if (p / "metadata.json").is_file():
            raise InputError(f"--out {out}: inside the run bundle {p}; `testbed analyze` "
                             "writes loose tables: choose a folder outside it (a bundle's "
                             "own tables come from `testbed report` / the run)")


def analyze_files(paths: list[Path], out: Path | None, bin_s: float,
                  chunk_bytes: int, packets: bool) -> list[list[str]]:
    """Analyse captures, write parquet under out; return table rows for printing.

    paths: captures; out: output directory or None; bin_s: throughput bin (s);
    chunk_bytes: read buffer; packets: also write each capture's packet table.
    """
    from analysis.bundle import build_tables
    from analysis.capture import CaptureAnalysis
    from analysis.pcap import stderr_progress
    from analysis.samples import empty_appflows
    from testbed.core.errors import InputError
    from testbed.core.safefiles import atomic_write
    from testbed.results.typed import write_typed

    if out is not None:
        _refuse_a_bundles_folder(out)
        if out.exists() and not out.is_dir():
            raise InputError(f"--out {out}: not a folder; give a folder for the tables")
    show = stderr_progress()  # a line on stderr now and then while reading a large capture
    caps = [CaptureAnalysis.of(p, chunk_bytes, show) for p in paths]  # all read before writing
    tables = build_tables(caps, {}, empty_appflows(), bin_s)
    if out is not None:
        import pyarrow.parquet as pq

        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"--out {out}: cannot make the folder ({exc.strerror}); give a "
                             "folder you can write") from None
        for name in ("flows", "timeseries"):
            for problem in write_typed(name, tables[name], out / f"{name}.parquet"):
                typer.echo(f"warning: {name}.parquet: {problem}", err=True)
        if packets:
            for c in caps:
                atomic_write(out / f"packets-{c.name}.parquet",
                             lambda p, c=c: pq.write_table(c.table.to_arrow(), p))
    fl = tables["flows"]
    return [[_fmt(k, r[k]) for k, _ in TABLE_COLUMNS] for _, r in fl.iterrows()]


def print_comparison(cmp: Any) -> None:
    """The terminal form of a comparison (`analysis.compare_report.Comparison`): one
    table per side against A, the notes and the warnings."""
    from rich.console import Console
    from rich.table import Table

    from analysis.compare_report import NOTES, table_header, table_rows

    console = Console(highlight=False)
    for i, rows in cmp.pairs:
        t = Table(title=cmp.title(i), header_style="bold")
        for n, head in enumerate(table_header(cmp, i)):
            t.add_column(head, overflow="fold", justify="left" if n in (0, 6) else "right")
        for r in table_rows(cmp, i, rows):
            t.add_row(*r)
        console.print(t)
    for note in NOTES:
        console.print(f"  {note}", soft_wrap=False)
    for w in cmp.warnings:
        typer.echo(f"warning: {w}", err=True)


def register(app: typer.Typer) -> None:
    """Add the ``analyze``, ``report`` and ``compare`` commands to the testbed CLI app."""

    @app.command()
    def analyze(ctx: typer.Context,
                pcaps: Annotated[list[Path], typer.Argument(
                    metavar="PCAP", help="pcap / pcapng files.")],
                out: Annotated[Path | None, typer.Option(
                    "--out", metavar="DIR",
                    help="Write flows.parquet and timeseries.parquet here.")] = None,
                bin_s: Annotated[float, typer.Option(
                    "--bin", metavar="SECONDS", help="Throughput bin (s).")] = 0.1,
                chunk_bytes: Annotated[int, typer.Option(
                    metavar="BYTES", min=4096, max=1 << 30,
                    help="Read buffer (bytes, 4096 .. 1 GiB).")] = DEFAULT_CHUNK_BYTES,
                packets: Annotated[bool, typer.Option("--packets", help="Also write the "
                                                      "decoded packets per capture.")] = False
                ) -> None:
        """Read captures, print a per-flow table and (with --out) write parquet tables."""
        if out is not None:
            hand_over_on_exit(ctx, out)  # under sudo: the tables are the user's
        rows = guarded(lambda: analyze_files(pcaps, out, bin_s, chunk_bytes, packets))
        from rich.console import Console
        from rich.table import Table

        t = Table(show_lines=False)
        for _, label in TABLE_COLUMNS:
            t.add_column(label, overflow="fold")
        for r in rows:
            t.add_row(*r)
        Console().print(t)
        if out is not None:
            typer.echo(f"wrote {out / 'flows.parquet'} and {out / 'timeseries.parquet'}")

    @app.command()
    def report(ctx: typer.Context,
               directory: Annotated[Path, typer.Argument(
                   metavar="DIR", help="A run bundle or sweep DIR (never written to when "
                                       "--out is given).")],
               paper: Annotated[Path | None, typer.Option(
                   metavar="FILE",
                   help="paper.toml with published values (default DIR/paper.toml).")] = None,
               out: Annotated[Path | None, typer.Option(
                   metavar="FILE", help="Output file (default DIR/report.html); figures are "
                                        "embedded in it.")] = None
               ) -> None:
        """Write a self-contained report.html for a run or a sweep (analysing first the
        runs whose analysis was left for later, as `testbed study` does in the VM)."""
        from analysis.report import write_report
        from testbed.core import safefiles
        from testbed.results.summary import write_summary
        from testbed.run.execute import analyze_run
        from testbed.run.sweep import finish_deferred, pending_analysis

        # under sudo: what it writes is the user's (with --out: FILE and its figures folder)
        hand_over_on_exit(ctx, *([out, out.with_name(f"{out.stem}-figures")] if out is not None
                                 else [directory]))
        if out is not None:  # DIR is only read: no deferred analysis written into it
            pending = guarded(lambda: pending_analysis(directory)) \
                if directory.is_dir() else []
            if pending:
                typer.echo(f"error: {directory}: {len(pending)} run(s) not analysed yet; the "
                           f"analysis writes into them: `testbed report {directory}` without "
                           "--out does it", err=True)
                raise typer.Exit(2)
        else:
            failed = guarded(lambda: finish_deferred(
                directory, analyze_run, progress=lambda line: typer.echo(line, err=True)))
            for run_id, err in failed:
                typer.echo(f"  failed: {run_id}: {err}", err=True)
            if directory.is_dir() and safefiles.file_in(directory, "summary.parquet"):
                # a sweep: its summary as the bundles say now (runs re-analysed, gone)
                guarded(lambda: write_summary(directory))

        skipped: list[str] = []
        path = guarded(lambda: write_report(directory, paper=paper, out=out,
                                            warnings=skipped))
        for line in skipped:
            typer.echo(f"warning: {line}", err=True)
        typer.echo(str(path))

    @app.command()
    def compare(paths: Annotated[list[Path], typer.Argument(
                    metavar="FOLDER", help="Result folders (the --out DIR of testbed run, "
                    "or one spec's folder of a study) or run bundles; the first is A, the "
                    "reference.  Only read, never written.")],
                by: Annotated[str | None, typer.Option(
                    metavar="KEY[=V1,V2]", help="Pool the runs of every FOLDER and make one "
                    "side per value of this swept key (e.g. controller.kind=ecmp,"
                    "spray: those values, the first is A; without values: all, sorted).")
                ] = None,
                where: Annotated[list[str] | None, typer.Option(
                    metavar="KEY=VALUE", help="Only runs with this swept value "
                    "(repeatable).")] = None,
                label: Annotated[list[str] | None, typer.Option(
                    metavar="NAME", help="A side's label, in side order (repeatable; "
                    "default: the folder's name, or the value with --by).")] = None,
                out: Annotated[Path | None, typer.Option(
                    "--out", metavar="DIR", help="Also write DIR/compare.html (figures "
                    "embedded); DIR may not be inside a FOLDER.")] = None,
                ) -> None:
        """Compare runs side by side: each metric, B - A and its 95 % interval, n per
        side; with --out, a page with overlaid time series and CDFs."""
        from analysis.compare_report import build, check_out, write_page

        if out is not None:
            guarded(lambda: check_out(out, paths))  # before any reading: a clear refusal
        cmp = guarded(lambda: build(paths, by, where or [], label or []))
        print_comparison(cmp)
        if out is not None:
            typer.echo(str(guarded(lambda: write_page(cmp, out, paths))))
