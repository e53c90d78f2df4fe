"""Unit tests never touch the testbed's real state directory (/run/testbed)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_state_dir(tmp_path_factory, monkeypatch):
    """Every test gets its own TESTBED_STATE_DIR (network manifests' trusted copies)."""
    path = tmp_path_factory.mktemp("state")
    path.chmod(0o700)
    monkeypatch.setenv("TESTBED_STATE_DIR", str(path))
    return path
