"""Which sysctls a spec may set per host (``transport.sysctl``): the one definition."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from testbed.core.errors import InputError

_SYSCTL_KEY = re.compile(r"net\.[A-Za-z0-9_.\-/]+")  # whole key: `fullmatch`
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # a tab separates fields: allowed


# sysctls a spec key sets, checks and records: set through transport.sysctl they would
# replace it without its checks (a typo in a control's name, a hand-over scheme's control)
OWNED = {"net.ipv4.tcp_congestion_control":
         "set transport.cc (or a workload's cc) instead: it is checked against the kernel, "
         "and the hand-over schemes and coupled controls set it themselves"}


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
        if key in OWNED:
            raise InputError(f"transport.sysctl.{key}: {OWNED[key]}")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)) or \
                (isinstance(value, float) and not value.is_integer()):
            shown = str(value).lower() if isinstance(value, bool) else repr(value)
            raise InputError(f"transport.sysctl.{key}: {shown} must be a string or an "
                             "integer (a sysctl takes 0/1, not true/false)")
        if isinstance(value, float):
            value = int(value)
        text = str(value)
        if _CONTROL.search(text):
            raise InputError(f"transport.sysctl.{key}: {text!r} holds a control character "
                             "(a newline, ...); write the value on one line (fields may be "
                             "separated by spaces or tabs)")
        out[key] = text
    return out
