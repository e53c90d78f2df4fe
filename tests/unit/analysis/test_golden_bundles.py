"""analyze_bundle's metrics tables on every test capture are identical to the golden copies
(written by the in-memory analysis), with the default read chunk and with a tiny one (so
that per-flow state is carried across many chunk boundaries)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from golden_bundles import compare, make_cases, tables_of


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return make_cases(tmp_path_factory.mktemp("golden-bundles"))


@pytest.mark.parametrize("chunk_bytes", [None, 4096])
def test_bundle_tables_identical_to_golden(cases, chunk_bytes):
    bad = []
    for case, run in cases.items():
        bad += compare(case, tables_of(run, chunk_bytes))
    assert not bad, "\n".join(bad)


def test_every_golden_table_is_within_its_columns_ranges(cases):
    from testbed.results.ranges import out_of_range

    bad = []
    for case, run in cases.items():
        for table, frame in tables_of(run).items():
            if table == "headline":  # JSON text here; the runs table holds its values
                frame = pd.DataFrame([{k: json.loads(v) for k, v in frame.iloc[0].items()}])
                table = "runs"
            bad += [f"{case}: {line}" for line in out_of_range(table, frame)]
    assert len(cases) > 5
    assert not bad, "\n".join(bad)
