"""Two real runs of P0's paths spec (an MPTCP transfer and a TCP flow pinned to the WiFi,
from a CI run), kept with whole captures in tests/data/analysis/p0-paths, and how a test
gets them analysed: `analysed_copy` copies them, unpacks the captures and runs the
analysis on each, as a real run's end does."""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Callable
from pathlib import Path

P0_PATHS = Path(__file__).resolve().parent / "data" / "analysis" / "p0-paths"
MPTCP_RUN, TCP_RUN = "p0-paths-quick-55986c1eb3-r1", "p0-paths-quick-eddae8e36d-r1"


def unpacked_copy(dest: Path) -> Path:
    """dest holding both runs' bundles with their captures unpacked, not analysed."""
    shutil.copytree(P0_PATHS, dest, dirs_exist_ok=True)
    for gz in dest.glob("*/pcap/*.pcap.gz"):
        gz.with_suffix("").write_bytes(gzip.decompress(gz.read_bytes()))
        gz.unlink()
    return dest


def analysed_copy(dest: Path) -> Path:
    """dest holding both runs' bundles, analysed (metrics/*.parquet written)."""
    from analysis.bundle import analyze_bundle

    unpacked_copy(dest)
    for run in (MPTCP_RUN, TCP_RUN):
        analyze_bundle(dest / run)
    return dest


def finished_copy(dest: Path, analyze: Callable[[Path], dict]) -> Path:
    """dest holding both runs as a run's end leaves them: analysed, the headline (from
    analyze: `analyze_bundle`, or `analyze_run` with the fidelity verdict) stored in
    metadata.json, the sha256 manifest and the file list written."""
    from testbed.results.bundle import Bundle
    from testbed.results.summary import take_analysis

    analysed_copy(dest)
    for name in (MPTCP_RUN, TCP_RUN):
        bundle = Bundle(dest / name)
        meta, _why = bundle.load_metadata()
        assert meta is not None
        take_analysis(meta, analyze(bundle.root))
        bundle.write_sha256_manifest()  # as every run's end writes it
        meta["files"] = bundle.manifest()
        bundle.write_metadata(meta)
    return dest
