"""Values a result table holds that its columns' definitions rule out.

Each numeric column of `testbed.results.columns` has a range (`Col.bounds`); a value
outside it is a defect of the analysis, never of the emulation.  The tests check every
golden bundle, every quick-study table in CI and the Ray test's bundles with
`out_of_range`.
"""

from __future__ import annotations

from typing import Any

from testbed.results.columns import FLT, INT, TABLES


def out_of_range(name: str, frame: Any) -> list[str]:
    """Values of frame (table name, as written) that its columns' definitions rule out:
    outside `Col.bounds`, and a row with more reordered than data packets.  One line per
    column at fault, with how many rows and an example; empty when there are none."""
    import pandas as pd

    problems = []
    for c in TABLES[name].columns:
        if c.name not in frame.columns or c.dtype not in (INT, FLT):
            continue
        low, high = c.bounds()
        values = pd.to_numeric(frame[c.name], errors="coerce")
        bad = pd.Series(False, index=frame.index)
        if low is not None:
            bad |= values < low
        if high is not None:
            bad |= values > high
        if bad.any():
            problems.append(f"{name}.{c.name}: {int(bad.sum())} value(s) outside "
                            f"{c.range_text()}, e.g. {values[bad].iloc[0]:g}")
    if name == "flows" and {"reordered_packets", "data_packets"} <= set(frame.columns):
        more = pd.to_numeric(frame["reordered_packets"], errors="coerce") > \
            pd.to_numeric(frame["data_packets"], errors="coerce")
        if more.any():
            problems.append(f"flows: {int(more.sum())} row(s) with more reordered_packets "
                            "than data_packets")
    return problems
