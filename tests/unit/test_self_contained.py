"""Nothing in the repository points outside it: a fresh clone is the whole project."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"\.\./shared|shared/seeds|shared/(DESIGN|STYLE)\.md")


def tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    out = []
    for name in names:
        path = ROOT / name
        if path.suffix in (".pcap", ".parquet", ".png", ".gz") or not path.is_file():
            continue
        out.append(path)
    return out


def test_no_file_points_outside_the_repository() -> None:
    found = []
    for path in tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if path == Path(__file__).resolve():
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:80]}")
    assert not found, "\n".join(found)


def test_papers_are_cited_not_linked_to_files_outside() -> None:
    """paper.toml names the paper (title, authors, venue), never a file beside the repo."""
    from testbed.core.compat import tomllib

    for toml in sorted((ROOT / "experiments").glob("*/paper.toml")):
        paper = tomllib.loads(toml.read_text())["paper"]
        assert "file" not in paper, f"{toml.relative_to(ROOT)}: paper.file points outside"
        assert paper["title"] and paper["authors"] and paper["venue"]
