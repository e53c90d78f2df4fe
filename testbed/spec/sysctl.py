"""Which sysctls a spec may set per host (``transport.sysctl``): the one definition."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from testbed.core.errors import InputError

_SYSCTL_KEY = re.compile(r"net\.[A-Za-z0-9_.\-/]+")  # whole key: `fullmatch`
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # a tab separates fields: allowed


def check_sysctls(extra: Mapping[str, Any]) -> dict[str, str]:
    """Validate user sysctls (``transport.sysctl``): only ``net.*`` keys, scalar values.

    extra: key -> value.  Returns key -> value as strings.
    """
    out = {}
    for key, value in extra.items():
        parts = re.split(r"[./]", key)
        if not _SYSCTL_KEY.fullmatch(key) or any(p in ("", ".", "..") for p in parts):
            raise InputError(f"transport.sysctl: {key!r} is not a per-namespace network "
                             "sysctl; only net.* keys can be set per host (no empty, "
                             "'.' or '..' parts)")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise InputError(f"transport.sysctl.{key}: {value!r} must be a string or number")
        text = str(value)
        if _CONTROL.search(text):
            raise InputError(f"transport.sysctl.{key}: {text!r} holds a control character "
                             "(a newline, ...); write the value on one line (fields may be "
                             "separated by spaces or tabs)")
        out[key] = text
    return out
