"""What a study report must satisfy, checked the same way by the unit and the
reproduction tests: every figure it references exists inside the study output folder and
is not blank (not a single colour), and no table cell holds JSON or a raw dictionary
(text starting with ``{`` or ``[``)."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np


class _Page(HTMLParser):
    """The image sources and table cell texts of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.cells: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.images.append(dict(attrs).get("src") or "")
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.cells.append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def parse(report: Path) -> _Page:
    """The report's images and cells."""
    page = _Page()
    page.feed(report.read_text(encoding="utf-8"))
    return page


def is_blank(png: Path) -> bool:
    """True when every pixel of the image has one colour."""
    img = np.asarray(mpimg.imread(png))
    return bool(np.ptp(img.reshape(-1, img.shape[-1]) if img.ndim == 3 else img,
                       axis=0).max() == 0)


def problems(report: Path) -> list[str]:
    """What is wrong with a study report ([] when nothing): figures missing, outside the
    folder or blank; table cells holding JSON."""
    found = []
    page = parse(report)
    root = report.parent.resolve()
    for src in page.images:
        target = (report.parent / src).resolve()
        if not src or src.startswith(("/", "data:", "http")) or root not in target.parents:
            found.append(f"figure {src!r} is not a file inside {root.name}")
        elif not target.is_file():
            found.append(f"figure {src} does not exist")
        elif is_blank(target):
            found.append(f"figure {src} is blank (one colour)")
    found += [f"cell holds JSON: {c[:60]!r}" for c in page.cells if c.startswith(("{", "["))]
    return found
