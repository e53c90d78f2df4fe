"""Golden analysis tables of every capture under tests/data, to pin the analysis output.

`tables_of(path)` renders every table the analysis derives from one capture (packet
columns, segments, flow rows, MPTCP data level, connections, RTT samples, time series) as
CSV text with full float precision.  The golden copies under
``tests/data/analysis/golden/`` were written by the analysis before the streaming reader;
`test_golden_tables.py` checks that today's output is identical.  To rewrite them after a
deliberate change of a metric::

    python tests/unit/analysis/golden.py --write
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

DATA = Path(__file__).resolve().parents[2] / "data"
GOLDEN = DATA / "analysis" / "golden"


def captures() -> list[Path]:
    """Every capture file under tests/data, sorted."""
    return sorted(p for p in DATA.rglob("*") if p.suffix in (".pcap", ".pcapng"))


def _csv(df: pd.DataFrame) -> str:
    return df.to_csv(index=False, float_format="%.17g", lineterminator="\n")


def tables_of(path: Path) -> dict[str, str]:
    """Table name -> CSV text of everything the analysis derives from the capture at path."""
    from analysis import bundle
    from analysis import samples as S
    from analysis.capture import CaptureAnalysis

    ca = CaptureAnalysis.of(path)
    out = {"packets": _csv(ca.table.to_pandas()),
           "segments": _csv(ca.segments),
           "flows": _csv(ca.flow_rows),
           "dsn": _csv(ca.dsn),
           "connections": _csv(ca.connections),
           "rtt": _csv(ca.rtt())}
    for name in sorted(ca.table.side):
        out[f"side-{name}"] = _csv(ca.table.side_frame(name))
    for bin_s in (0.1, 0.01):
        t = bundle.build_tables([ca], {}, S.empty_appflows(), bin_s)
        out[f"run-flows-{bin_s:g}"] = _csv(t["flows"])
        out[f"timeseries-{bin_s:g}"] = _csv(t["timeseries"])
    return out


def golden_path(capture: Path, table: str) -> Path:
    """Where the golden copy of one table of one capture lives."""
    return GOLDEN / f"{capture.name}.{table}.csv"


def main() -> None:
    """Write (--write) or check the golden tables; exit 1 listing any difference."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the golden copies")
    args = ap.parse_args()
    bad = []
    for cap in captures():
        for name, text in tables_of(cap).items():
            p = golden_path(cap, name)
            if args.write:
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(text, encoding="utf-8")
            elif not p.is_file() or p.read_text(encoding="utf-8") != text:
                bad.append(p.name)
    print("\n".join(f"differs: {b}" for b in bad) or "all golden tables identical")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    main()
