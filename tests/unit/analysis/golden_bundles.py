"""Golden ``metrics/*.parquet`` of `analysis.bundle.analyze_bundle` on every test capture.

Each bundle under tests/data/analysis (captures unpacked), each bare capture under
tests/data put alone into a bundle without metadata, and a small synthetic MPTCP capture
(`benchmarks.analysis_speed.synth_capture`) are analysed; the tables they give are kept
under ``tests/data/analysis/golden-bundles/`` as written by the in-memory analysis before
the streaming pipeline, and `test_golden_bundles.py` checks that today's are identical
(``pandas.testing.assert_frame_equal``, exact).  To rewrite them after a deliberate change
of a metric::

    python tests/unit/analysis/golden_bundles.py --write
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd

DATA = Path(__file__).resolve().parents[2] / "data"
GOLDEN = DATA / "analysis" / "golden-bundles"
TABLES = ("flows", "timeseries", "rtt", "cwnd", "ping", "events")
SYNTH_PACKETS = 30_000


def _bundles() -> list[Path]:
    """Every bundle (a folder with metadata.json and pcap/) under tests/data/analysis."""
    return sorted(p.parent for p in (DATA / "analysis").rglob("metadata.json")
                  if (p.parent / "pcap").is_dir())


def _bare_captures() -> list[Path]:
    """Capture files under tests/data/analysis that are not part of a bundle."""
    inside = set(_bundles())
    return sorted(p for p in (DATA / "analysis").rglob("*")
                  if p.is_file() and p.name.endswith((".pcap", ".pcapng", ".pcap.gz"))
                  and p.parent.parent not in inside and GOLDEN not in p.parents)


def _unpack(src: Path, dst: Path) -> None:
    if src.name.endswith(".gz"):
        dst.with_name(dst.name.removesuffix(".gz")).write_bytes(gzip.decompress(src.read_bytes()))
    else:
        shutil.copyfile(src, dst)


def make_cases(where: Path) -> dict[str, Path]:
    """Case name -> a bundle folder under where, ready for analyze_bundle."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from benchmarks.analysis_speed import _bundle, synth_capture

    cases = {}
    for b in _bundles():
        dst = where / b.name
        shutil.copytree(b, dst, ignore=shutil.ignore_patterns("*.gz", "metrics"))
        for gz in (b / "pcap").glob("*"):
            _unpack(gz, dst / "pcap" / gz.name)
        cases[b.name] = dst
    for cap in _bare_captures():
        name = cap.name.removesuffix(".gz")
        dst = where / f"bare-{name.replace('.', '_')}"
        (dst / "pcap").mkdir(parents=True)
        _unpack(cap, dst / "pcap" / cap.name)
        cases[dst.name] = dst
    cap = where / "synth.pcap"
    synth_capture(cap, SYNTH_PACKETS)
    cases["synth"] = _bundle(cap, where)
    return cases


def tables_of(run: Path, chunk_bytes: int | None = None) -> dict[str, pd.DataFrame]:
    """Analyse the bundle run; table name -> its metrics table (plus the headline).

    chunk_bytes: the capture read chunk (None: the default)."""
    from analysis.bundle import analyze_bundle

    head = analyze_bundle(run) if chunk_bytes is None else analyze_bundle(
        run, chunk_bytes=chunk_bytes)
    out = {t: pd.read_parquet(run / "metrics" / f"{t}.parquet") for t in TABLES}
    out["headline"] = pd.DataFrame([{k: json.dumps(v) for k, v in head.items()}])
    return out


def golden_path(case: str, table: str) -> Path:
    """Where the golden copy of one table of one case lives."""
    return GOLDEN / case / f"{table}.parquet"


def compare(case: str, got: dict[str, pd.DataFrame]) -> list[str]:
    """Differences between got and the golden copies of case (empty: identical)."""
    bad = []
    for name, df in got.items():
        p = golden_path(case, name)
        if not p.is_file():
            bad.append(f"{case}/{name}: no golden copy")
            continue
        try:
            pd.testing.assert_frame_equal(df, pd.read_parquet(p), check_exact=True)
        except AssertionError as exc:
            bad.append(f"{case}/{name}: {str(exc).splitlines()[0:4]}")
    return bad


def main() -> None:
    """Write (--write) or check the golden tables; exit 1 listing any difference."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the golden copies")
    args = ap.parse_args()
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        for case, run in make_cases(Path(tmp)).items():
            got = tables_of(run)
            if args.write:
                for name, df in got.items():
                    golden_path(case, name).parent.mkdir(parents=True, exist_ok=True)
                    df.to_parquet(golden_path(case, name))
            else:
                bad += compare(case, got)
    print("\n".join(bad) or "all golden bundle tables identical")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    main()
