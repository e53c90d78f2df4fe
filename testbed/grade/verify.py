"""A submission's bundles re-analysed from their captures, and what that says of them.

`rebuild(found, workspace)` copies every bundle of a taken-in submission (any folder with
a ``metadata.json``, at any depth up to `MAX_DEPTH`) into ``workspace/<run-id>/`` without
its ``metrics/``, runs the analysis (`analysis.bundle.analyze_bundle`) on the copy, stores
the recomputed headline in the copy's metadata.json, and compares the stored metrics
tables and headline with the recomputed ones, and checks every file against the run's
``manifest.sha256`` (`Bundle.check_sha256_manifest`).  The workspace is what grading queries: the
stored metrics are never trusted.  With an assignment, each run's spec.toml is compared
with the assignment's spec of the same ``name`` on the keys the rubric fixes.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.core import safefiles
from testbed.core.compat import tomllib
from testbed.core.errors import InputError, one_line
from testbed.grade.rubric import Assignment, fixed_differences
from testbed.results.bundle import STATUSES, Bundle
from testbed.results.query import VIEWS
from testbed.results.summary import take_analysis

MAX_DEPTH = 4
SKIPPED = {"metrics", "figures", "report.html"}  # never copied: recomputed or not graded


class VerifyError(InputError):
    """A bundle that cannot be re-analysed (a truncated capture, malformed files)."""


@dataclass
class RunCheck:
    """What verification found for one run."""

    run_id: str
    differs: list[str] = field(default_factory=list)  # stored tables unlike the recomputed
    spec_problems: list[str] = field(default_factory=list)
    manifest: list[str] = field(default_factory=list)  # what manifest.sha256 does not match
    source: Path | None = None  # the bundle that was re-analysed (before its copy)
    broken: str | None = None  # why the views leave the run out as ``broken``, if they do

    @property
    def flagged(self) -> bool:
        return bool(self.differs or self.spec_problems or self.manifest or self.broken)

    def lines(self) -> list[str]:
        out = [f"{self.run_id}: {self.broken}"] if self.broken else []
        if self.differs:
            out.append(f"{self.run_id}: stored metrics differ from the captures' "
                       f"({', '.join(self.differs)}); graded on the recomputed ones")
        if self.manifest:
            more = f" and {len(self.manifest) - 3} more" if len(self.manifest) > 3 else ""
            out.append(f"{self.run_id}: files unlike the run's sha256 manifest "
                       f"({'; '.join(self.manifest[:3])}{more})")
        out += [f"{self.run_id}: {p}" for p in self.spec_problems]
        return out


@dataclass
class Verification:
    """The runs of one submission as re-analysed into workspace."""

    workspace: Path
    runs: list[RunCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.runs) and not any(r.flagged for r in self.runs)

    def summary(self) -> str:
        """One line for the gradebook."""
        if not self.runs:
            return "no result bundles found"
        if self.ok:
            return (f"ok: {len(self.runs)} run(s); stored metrics match the captures, "
                    "every file its run's sha256 manifest, and the specs keep the "
                    "assignment's fixed parts")
        return "; ".join(line for r in self.runs for line in r.lines())


def find_bundles(root: Path) -> list[Path]:
    """Folders under root holding a metadata.json (regular file), sorted; links are not
    followed and a bundle's own sub-folders and ``_attempts`` are not searched."""
    found: list[Path] = []

    def walk(here: Path, depth: int) -> None:
        if safefiles.file_in(here, "metadata.json") is not None and here != root:
            found.append(here)
            return
        if depth >= MAX_DEPTH:
            return
        with os.scandir(here) as it:
            for item in sorted(it, key=lambda e: e.name):
                if item.name != "_attempts" and \
                        stat.S_ISDIR(item.stat(follow_symlinks=False).st_mode):
                    walk(Path(item.path), depth + 1)

    if safefiles.file_in(root, "metadata.json") is not None:
        return [root]
    walk(root, 0)
    return found


def _read_table(path: Path) -> Any:
    import pandas as pd
    import pyarrow as pa

    try:
        return pd.read_parquet(io.BytesIO(safefiles.read_bytes(path)))
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise VerifyError(f"{path.parent.parent.name}: metrics/{path.name} is not a readable "
                          f"parquet table ({one_line(exc)})") from None


def _same(a: Any, b: Any) -> bool:
    """Whether stored table a holds what recomputed table b holds.  A column that only b
    has and that is null in every row of b (one a later bundle format added, whose data
    the older bundle's samples do not carry) is no difference."""
    import pandas as pd
    from pandas.testing import assert_frame_equal

    a, b = a.reset_index(drop=True), b.reset_index(drop=True)
    added = [c for c in b.columns if c not in a.columns and b[c].isna().all()]
    b = b.drop(columns=added)
    for col in set(a.columns) & set(b.columns):
        # a missing value is None on both sides, whichever way it was stored (an older
        # writer kept an all-null column as objects, today's as its declared type)
        if not (pd.api.types.is_numeric_dtype(a[col]) and pd.api.types.is_numeric_dtype(b[col])):
            a[col] = a[col].astype(object).where(a[col].notna(), None)
            b[col] = b[col].astype(object).where(b[col].notna(), None)
    try:
        assert_frame_equal(a, b, check_dtype=False, check_exact=False, rtol=1e-6)
    except AssertionError:
        return False
    return True


def _same_headline(stored: Any, recomputed: dict[str, Any]) -> bool:
    """Whether the stored headline holds the recomputed values (NaN and null alike)."""
    if not isinstance(stored, dict):
        return False

    def norm(v: Any) -> Any:
        return None if isinstance(v, float) and v != v else v

    for key, value in recomputed.items():
        want, got = norm(value), norm(stored.get(key))
        if isinstance(want, float) and isinstance(got, (int, float)):
            if abs(want - got) > 1e-6 * max(abs(want), 1.0):
                return False
        elif got != want:
            return False
    return True


def _copy_bundle(src: Path, dest: Path) -> None:
    """src (already taken in, so links and special files are gone) without SKIPPED."""
    shutil.copytree(src, dest, ignore=lambda d, names: [n for n in names if Path(d) == src
                                                        and n in SKIPPED])


def rebuild_one(src: Path, dest: Path) -> RunCheck:
    """Copy one bundle to dest, re-analyse it there, compare with src's stored metrics."""
    from analysis.bundle import analyze_bundle

    check = RunCheck(dest.name, manifest=Bundle(src).check_sha256_manifest(), source=src)
    _copy_bundle(src, dest)
    try:
        head = analyze_bundle(dest)
    except (InputError, OSError, ValueError) as exc:
        # named as the user's file, not the private copy it was read from
        why = one_line(exc).replace(str(dest), str(src))
        raise VerifyError(f"{src.name}: cannot be re-analysed from its captures "
                          f"({why})") from None
    except (TypeError, AttributeError, KeyError) as exc:
        # a value of a kind no run writes, in a file the shape checks do not cover: one
        # student's damaged bundle is that student's error row, not the class's traceback
        why = one_line(exc).replace(str(dest), str(src))
        raise VerifyError(f"{src.name}: cannot be re-analysed: one of its files holds a "
                          f"value of a kind no run writes ({type(exc).__name__}: {why}); "
                          "re-run the run") from None
    for table in VIEWS:
        stored = safefiles.file_in(src, f"metrics/{table}.parquet")
        if stored is None:
            check.differs.append(f"{table} missing")
        elif not _same(_read_table(stored), _read_table(dest / "metrics" / f"{table}.parquet")):
            check.differs.append(table)
    bundle = Bundle(dest)
    meta, why = bundle.load_metadata()
    if meta is None:
        raise VerifyError(f"{src.name}: metadata.json is not readable ({why})")
    if not _same_headline(meta.get("headline"), head):
        check.differs.append("headline")
    take_analysis(meta, head)  # the fidelity verdict stays as the run recorded it
    meta["files"] = bundle.manifest()
    bundle.write_metadata(meta)
    if meta.get("status") not in STATUSES:  # what makes the views call the run broken
        check.broken = (f"status {meta.get('status')!r} is not a run status, so the views "
                        "leave the run out as broken and no check reads it; re-run the run")
    return check


def check_spec(bundle: Path, assignment: Assignment) -> list[str]:
    """Why a run's spec.toml does not fit the assignment (empty when it does)."""
    from testbed.spec.load import validate_spec

    path = safefiles.file_in(bundle, "spec.toml")
    if path is None:
        return ["no spec.toml"]
    try:
        data = tomllib.loads(safefiles.read_text(path))
        run_spec = validate_spec(data, "spec.toml")
    except (tomllib.TOMLDecodeError, InputError, UnicodeDecodeError) as exc:
        return [f"spec.toml does not load ({one_line(exc)})"]
    found = assignment.spec_named(run_spec.name)
    if found is None:
        names = ", ".join(f"{f}: {s.name}" for f, s in assignment.specs.items())
        return [f"runs spec {run_spec.name!r}, not one of the assignment's ({names})"]
    part, spec = found
    changed = fixed_differences(spec, run_spec, part.fixed)
    return [f"spec changes what {part.file} fixes: {', '.join(changed)}"] if changed else []


def rebuild(found: Path, workspace: Path, assignment: Assignment | None = None
            ) -> Verification:
    """Re-analyse every bundle under found into workspace (made here); see the module doc.

    Raises `VerifyError` for a bundle that cannot be re-analysed or two bundles with one
    run id.
    """
    workspace.mkdir(parents=True, exist_ok=True)
    result = Verification(workspace)
    for src in find_bundles(found):
        dest = workspace / src.name
        if dest.exists():
            raise VerifyError(f"two bundles named {src.name}; hand in each run once")
        check = rebuild_one(src, dest)
        if assignment is not None:
            check.spec_problems = check_spec(dest, assignment)
        result.runs.append(check)
    return result


def metadata_of(bundle: Path) -> dict[str, Any]:
    """A re-analysed bundle's metadata.json ({} when unreadable)."""
    try:
        return json.loads((bundle / "metadata.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
