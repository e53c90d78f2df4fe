"""Small shims so the code runs on Python 3.10 (Ubuntu 22.04's system interpreter)."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = ["tomllib"]
