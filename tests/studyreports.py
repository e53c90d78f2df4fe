"""What a study report must satisfy, checked the same way by the unit and the
reproduction tests: every figure it references exists inside the study output folder and
is not blank (not a single colour), and no table cell holds JSON or a raw dictionary
(text starting with ``{`` or ``[``).  `chromium_images` loads a page (a study report, a
grading feedback page) in headless Chromium and counts the images that did not decode."""

from __future__ import annotations

import re
import shutil
import tempfile
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


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# appended to a copy of the page: after load, how many images did not decode
_PROBE = ("<script>window.addEventListener('load', () => {const i = [...document.images];"
          "document.body.dataset.images = i.length; document.body.dataset.broken = "
          "i.filter(x => !x.complete || x.naturalWidth === 0).length;});</script>")


# the same for inline SVG figures (sweep reports): how many, and how many were drawn at
# no size or hold nothing drawn
_SVG_PROBE = ("<script>window.addEventListener('load', () => {const s = [...document."
              "querySelectorAll('svg')].filter(x => !x.parentElement.closest('svg')); "
              "document.body.dataset.svgs = s.length; document.body.dataset.empty = "
              "s.filter(x => {const r = x.getBoundingClientRect(); return r.width === 0 || "
              "r.height === 0 || !x.querySelector('path, line, polyline, rect');}).length;"
              "});</script>")


def chromium_svgs(page: Path, tmp: Path) -> tuple[int, int]:
    """(inline SVG figures, those drawn at no size or empty) of page in headless
    Chromium, loaded as `chromium_images` loads it."""
    dom = _load(page, tmp, _SVG_PROBE)
    svgs = re.search(r'data-svgs="(\d+)"', dom)
    empty = re.search(r'data-empty="(\d+)"', dom)
    assert svgs and empty, f"{page.name} did not finish loading in Chromium"
    return int(svgs.group(1)), int(empty.group(1))


def chromium_images(page: Path, tmp: Path) -> tuple[int, int]:
    """(images, images that did not decode) of page loaded in headless Chromium.  The
    page is loaded from a copy in tmp with a ``<base>`` at its own folder, so the folder
    is left as it was."""
    dom = _load(page, tmp, _PROBE)
    images = re.search(r'data-images="(\d+)"', dom)
    broken = re.search(r'data-broken="(\d+)"', dom)
    assert images and broken, f"{page.name} did not finish loading in Chromium"
    return int(images.group(1)), int(broken.group(1))


def _load(page: Path, tmp: Path, probe_js: str) -> str:
    """The DOM of a copy of page (in tmp, ``<base>`` at page's folder, probe_js added)
    after headless Chromium loaded it."""
    from testbed.core.commands import CommandRunner

    assert CHROMIUM is not None
    base = page.parent.resolve().as_uri() + "/"
    text = page.read_text(encoding="utf-8").replace(
        "<head>", f'<head><base href="{base}">', 1).replace("</body>", probe_js + "</body>",
                                                            1)
    probe = tmp / f"probe-{page.name}"
    probe.write_text(text, encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        dom = CommandRunner().run(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--disable-background-networking", "--disable-sync",
             "--disable-component-update", "--allow-file-access-from-files",
             f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--dump-dom",
             probe.resolve().as_uri()], timeout=120).stdout
    return dom
