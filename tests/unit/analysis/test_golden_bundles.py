"""analyze_bundle's metrics tables on every test capture are identical to the golden copies
(written by the in-memory analysis), with the default read chunk and with a tiny one (so
that per-flow state is carried across many chunk boundaries)."""

from __future__ import annotations

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
