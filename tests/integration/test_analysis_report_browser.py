"""The report opens in headless Chromium: figures render (screenshot) and are in the DOM.

Needs no root or kernel features, only Debian's ``chromium`` package; it runs wherever
chromium is installed (host or VM) and skips elsewhere.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from testbed.core.commands import CommandRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "analysis"))

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                 "(apt-get install chromium)")]


def _chromium(url: str, *args: str) -> str:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
                *args, url]
        return CommandRunner().run(argv, timeout=120).stdout


def test_report_renders_in_chromium(tmp_path):
    from test_bundle_report import _run_dir

    from analysis.report import write_report

    run = _run_dir(tmp_path)
    page = write_report(run)
    url = page.resolve().as_uri()
    dom = _chromium(url, "--dump-dom")
    assert dom.count("<svg") >= 3 and "Throughput per path" in dom and "<table" in dom
    shot = tmp_path / "shot.png"
    _chromium(url, f"--screenshot={shot}", "--window-size=1100,1600")
    import matplotlib.image as mpimg

    img = mpimg.imread(shot)[..., :3]
    assert img.shape[0] >= 1000
    ink = (img < 0.9).any(axis=2)
    colour = (np.ptp(img, axis=2) > 0.3)          # drawn lines (tab:blue, tab:orange, ...)
    assert ink.mean() > 0.02, "page looks blank"
    assert colour.sum() > 500, "no coloured plot lines rendered"
