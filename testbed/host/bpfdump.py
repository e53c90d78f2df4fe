"""Reading ``bpftool map dump`` output (JSON with BTF) of the testbed's ring maps: the
coupled controls' ``trace`` (`testbed.host.coupled.trace`) and the hand-over programs'
``ho_log`` (`testbed.host.handover.log`)."""

from __future__ import annotations

import json
from typing import Any

from testbed.core.errors import InputError


def written_values(text: str, what: str) -> list[dict[str, Any]]:
    """The written records (``seq`` above 0) of a ring map from bpftool's JSON dump.

    text: ``bpftool [-j] map dump id N`` output (with BTF: JSON either way; ``-j`` adds
    the raw bytes and puts the typed view under "formatted"); what: the map's name, for
    the error.  Raises `InputError` when the text is not such a dump.
    """
    try:
        rows = json.loads(text)
        if not isinstance(rows, list):
            raise TypeError("expected a list of entries")
        values = [r.get("formatted", r)["value"] for r in rows]
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InputError(f"not a bpftool dump of a {what} map: {exc}") from exc
    return [v for v in values if isinstance(v, dict) and v.get("seq")]
