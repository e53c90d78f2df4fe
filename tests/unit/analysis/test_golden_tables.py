"""The analysis tables of every capture under tests/data are identical to the golden copies."""

from __future__ import annotations

import pytest
from golden import captures, golden_path, tables_of


@pytest.mark.parametrize("capture", captures(), ids=lambda p: p.name)
def test_tables_identical_to_golden(capture):
    for name, text in tables_of(capture).items():
        p = golden_path(capture, name)
        assert p.is_file(), f"no golden copy {p.name}: run tests/unit/analysis/golden.py --write"
        assert text == p.read_text(encoding="utf-8"), f"{p.name} differs from its golden copy"
