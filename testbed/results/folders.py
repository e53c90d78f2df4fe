"""Which folders of a results folder are runs: `bundles_at` (a run's bundle itself, or the
bundles under a folder) and `not_bundles` (folders that look like runs but are not read
as such, with the reason, for readers to name instead of leaving them out silently)."""

from __future__ import annotations

import os
from pathlib import Path

from testbed.core import safefiles
from testbed.results.bundle import Bundle, bundles, has_metadata


def bundles_at(path: Path) -> list[Bundle]:
    """The bundles a path names: itself, when it is one run's bundle (its metadata.json a
    regular file), else `bundles` under it."""
    path = Path(path)
    if path.is_dir() and safefiles.check(path, path / "metadata.json") is None:
        return [Bundle(path)]
    return bundles(path)


def not_bundles(out: Path) -> list[str]:
    """Folders directly under DIR that look like bundles but are not read as such, each
    with the reason (a linked folder, a metadata.json that is a link or no regular file):
    a reader says so instead of leaving the run out silently."""
    out = Path(out)
    found: list[str] = []
    if safefiles.check(out, out / "metadata.json") is None:
        return found  # one run's bundle: its folders are its own
    try:
        entries = sorted(out.iterdir()) if out.is_dir() else []
    except OSError:
        return []
    for p in entries:
        if p.name.startswith(("_", ".")):
            continue
        if p.is_symlink():
            if (p / "metadata.json").exists():
                found.append(f"{p}: a symbolic link to a folder (not followed); not read")
            continue
        if not p.is_dir() or not os.path.lexists(p / "metadata.json"):
            continue
        if not has_metadata(out, p.name):
            why = safefiles.check(out, p / "metadata.json")
            found.append(f"{p}: metadata.json is {why}; not read as a run")
    return found


def why_no_bundles(out: Path) -> str | None:
    """Why a folder in which no bundle is read holds none after all, when it looks like
    one or like a folder of them (a metadata.json that is a FIFO, a folder or a link):
    the first such reason with a count of the others, else None."""
    own = safefiles.check(out, Path(out) / "metadata.json")
    if own not in (None, "missing"):
        return f"{Path(out) / 'metadata.json'} is {own}; not read as a run"
    found = not_bundles(out)
    if not found:
        return None
    return found[0] + (f" (and {len(found) - 1} more)" if len(found) > 1 else "")


def sweep_folders(path: Path) -> list[str]:
    """The names of path's sub-folders that are sweeps (hold a ``summary.parquet``, not
    through a link): a study's output holds one per spec."""
    return sorted(p.name for p in Path(path).iterdir()
                  if p.is_dir() and safefiles.file_in(p, "summary.parquet") is not None)
