"""Stored metrics made again, in place, from a run's own captures: `reanalyse`.

`testbed verify DIR --update` uses it for the runs whose stored tables or headline differ
from what today's analysis computes from their captures (a bundle made before a metric
was fixed).  Only a complete, analysed run whose files still match its ``manifest.sha256``
is touched: new tables would otherwise stand on changed captures.  A run broken only in
its ``metrics/`` (a table edited or removed after the run) is repaired the same way.
What is written: ``metrics/`` (each table through a temporary file, as a run's end writes it); in
``metadata.json`` the headline, the fidelity verdict, ``files`` and ``reanalysed`` (when,
by which testbed, what differed); and the ``summary.parquet`` of a sweep folder holding
such a run.  Captures, samples, logs, the spec and the sha256 manifest are not touched,
and nothing is reached through a symbolic link.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.core import safefiles
from testbed.core.errors import TestbedError, one_line
from testbed.results.bundle import BROKEN, COMPLETE, DEFERRED, Bundle, FolderBusy, locked
from testbed.results.summary import take_analysis, write_summary

Analyze = Callable[[Path], dict[str, Any]]  # `testbed.run.execute.analyze_run`


def reanalyse(runs: list[tuple[Path, list[str]]], analyze: Analyze) -> list[tuple[str, bool]]:
    """Analyse each run again in place; return one (line, updated) per run.

    runs: (a run's bundle, what verification found different in it); analyze: computes a
    bundle's ``metrics/`` and returns its headline with the fidelity verdict under
    ``fidelity``.  A sweep folder's runs are done under its lock (no `testbed run` writes
    there meanwhile) and its summary is written again afterwards.
    """
    by_folder: dict[Path, list[tuple[Path, list[str]]]] = {}
    for root, differs in runs:
        by_folder.setdefault(Path(root).parent, []).append((Path(root), differs))
    out: list[tuple[str, bool]] = []
    for folder, items in by_folder.items():
        sweep = safefiles.file_in(folder, "summary.parquet") is not None
        try:
            with locked(folder) if sweep else contextlib.nullcontext():
                done = [_one(root, differs, analyze) for root, differs in items]
                if sweep and any(ok for _line, ok in done):
                    write_summary(folder)
        except FolderBusy:  # another command writes there: leave these runs be
            done = [(f"{root.name}: not updated: a `testbed run` is writing into {folder}; "
                     "run this again when it has ended", False) for root, _d in items]
        out += done
    return out


def _one(root: Path, differs: list[str], analyze: Analyze) -> tuple[str, bool]:
    from testbed import __version__

    run = root.name
    bundle = Bundle(root)
    status, broken = bundle.status_and_why()
    meta, why = bundle.load_metadata()
    if status == BROKEN and meta is not None and meta.get("status") == COMPLETE:
        # a run whose stored metrics/ alone was damaged (a table changed or lost) is what
        # this repairs: everything else must still be as the run wrote it
        broken = bundle.file_problem(meta, skip="metrics/")
        status = COMPLETE if broken is None else BROKEN
    if status != COMPLETE:
        return f"{run}: not updated: the run is {status}" + (
            f" ({broken})" if broken else ""), False
    if meta is None:
        return f"{run}: not updated: metadata.json is {why}", False
    if meta.get("analysis") == DEFERRED:
        return (f"{run}: not updated: its analysis was left for later; `testbed report "
                f"{root.parent}` does it"), False
    unlike = bundle.check_sha256_manifest()
    if unlike:
        return (f"{run}: not updated: its files are unlike its sha256 manifest ({unlike[0]}"
                f"{f' and {len(unlike) - 1} more' if len(unlike) > 1 else ''}); new "
                "metrics would stand on changed files"), False
    try:
        headline = analyze(root)
    except (TestbedError, OSError, ValueError) as exc:
        return f"{run}: not updated: the analysis failed ({one_line(exc)})", False
    take_analysis(meta, headline)
    meta["reanalysed"] = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                          "testbed": __version__, "differed": list(differs)}
    meta["files"] = bundle.manifest()
    bundle.write_metadata(meta)
    line = f"{run}: updated ({', '.join(differs)} made again from its captures)"
    if safefiles.file_in(root, "report.html") is not None:
        line += f"; its report.html is older: `testbed report {root}` writes it again"
    return line, True
