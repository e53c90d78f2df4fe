"""Unit tests never touch the testbed's real state directory (/run/testbed) nor the
user's kernel records."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_state_dir(tmp_path_factory, monkeypatch):
    """Every test gets its own TESTBED_STATE_DIR (network manifests' trusted copies)."""
    path = tmp_path_factory.mktemp("state")
    path.chmod(0o700)
    monkeypatch.setenv("TESTBED_STATE_DIR", str(path))
    return path


@pytest.fixture(autouse=True)
def _private_kernel_records(tmp_path_factory, monkeypatch):
    """Kernel records (doctor, a real run's start) go to a folder of the test's own."""
    path = tmp_path_factory.mktemp("kernels")
    monkeypatch.setenv("TESTBED_KERNEL_RECORDS", str(path))
    return path
