"""The coupled controls' decision log: parse a ``bpftool map dump`` of a control's
``trace`` map (with BTF: JSON, with or without ``-j``) into records, oldest first.

Each record is one decision of one subflow (see ``bpf/coupled.h``): ``kind``
(``increase``: window increase per acknowledged segment, in 2^-20 segments;
``ssthresh``: the slow-start threshold after a loss; ``round``: wVegas's window after a
round trip), ``self`` (the deciding subflow's slot), ``acked``, ``in_ss`` and, per slot
of the connection, ``cwnd`` (segments), ``rtt_us``, ``aux`` and ``aux2`` (OLIA: KiB
acknowledged between the two last losses and since the last; wVegas: base RTT), then
``out``.  The ring keeps the last 4096 decisions of the run.
"""

from __future__ import annotations

from typing import Any

from testbed.core.errors import InputError
from testbed.host.bpfdump import written_values

KINDS = {1: "increase", 2: "ssthresh", 3: "round"}
FIELDS = ("seq", "kind", "self", "acked", "in_ss", "cwnd", "rtt_us", "aux", "aux2", "out")


def parse_dump(text: str, cc: str) -> list[dict[str, Any]]:
    """Records from bpftool's JSON dump of a ``trace`` map (written ones, by ``seq``).

    text: ``bpftool [-j] map dump id N`` output; cc: the control's name (added to each).
    Raises `InputError` when the text is not such a dump.
    """
    out = []
    for v in written_values(text, "trace"):
        rec = {k: v[k] for k in FIELDS if k in v}
        if set(rec) != set(FIELDS):
            raise InputError(f"trace record without {sorted(set(FIELDS) - set(rec))}")
        rec["kind"] = KINDS.get(int(rec["kind"]), str(rec["kind"]))
        rec["cc"] = cc
        out.append(rec)
    out.sort(key=lambda r: r["seq"])
    return out
