"""tshark as a reference: argv builders and pure parsers of its output.

Used by the cross-check tests and the speed benchmark; run the argv through
`testbed.core.commands.CommandRunner`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import pandas as pd

BENCH_FIELDS = ("frame.time_epoch", "ip.src", "ip.dst", "tcp.srcport", "tcp.dstport",
                "tcp.seq_raw", "tcp.ack_raw", "tcp.len", "tcp.options.mptcp.rawdataseqno")

ANALYSIS_FIELDS = ("frame.number", "ip.src", "ipv6.src", "tcp.srcport", "ip.dst", "ipv6.dst",
                   "tcp.dstport", "tcp.len", "tcp.analysis.retransmission",
                   "tcp.analysis.fast_retransmission", "tcp.analysis.spurious_retransmission",
                   "tcp.analysis.out_of_order", "tcp.analysis.lost_segment")


def fields_argv(path: str | os.PathLike, fields: Sequence[str],
                prefs: Sequence[str] = (), display_filter: str | None = None,
                two_pass: bool = False) -> list[str]:
    """tshark -T fields argv. path: capture; fields: field names; prefs: "name:value" items;
    display_filter: -Y filter; two_pass: add -2 (needed for some analysis flags)."""
    argv = ["tshark", "-n", "-r", str(path)]
    if two_pass:
        argv.append("-2")
    for p in prefs:
        argv += ["-o", p]
    if display_filter:
        argv += ["-Y", display_filter]
    argv += ["-T", "fields", "-E", "separator=\t", "-E", "occurrence=f"]
    for f in fields:
        argv += ["-e", f]
    return argv


def conv_argv(path: str | os.PathLike, proto: str = "tcp") -> list[str]:
    """tshark conversation statistics argv. proto: tcp or udp."""
    return ["tshark", "-n", "-q", "-r", str(path), "-z", f"conv,{proto}"]


def parse_fields(text: str, fields: Sequence[str]) -> pd.DataFrame:
    """Parse `tshark -T fields` output (tab separated, one packet per line) into strings."""
    rows = [line.split("\t") for line in text.splitlines() if line]
    rows = [r + [""] * (len(fields) - len(r)) for r in rows]
    return pd.DataFrame(rows, columns=list(fields), dtype=object)


def parse_conv(text: str) -> pd.DataFrame:
    """Parse `tshark -z conv,tcp|udp` into rows: a, b (addr:port), frames/bytes each way.

    Columns: a, b, frames_ba, bytes_ba, frames_ab, bytes_ab, frames, bytes (tshark's
    left-hand "<-" columns are packets from b to a, "->" from a to b).
    """
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 11 and parts[1] == "<->":
            nums = []
            k = 3
            while k < len(parts) and len(nums) < 6:
                if parts[k].replace(",", "").isdigit():
                    v = int(parts[k].replace(",", ""))
                    if k + 1 < len(parts) and parts[k + 1] in ("bytes", "kB", "MB", "GB"):
                        v = _scaled(v, parts[k + 1])
                        k += 1
                    nums.append(v)
                k += 1
            if len(nums) == 6:
                out.append((parts[0], parts[2], *nums))
    return pd.DataFrame(out, columns=["a", "b", "frames_ba", "bytes_ba", "frames_ab",
                                      "bytes_ab", "frames", "bytes"])


def _scaled(value: int, unit: str) -> int:
    return value * {"bytes": 1, "kB": 1000, "MB": 10**6, "GB": 10**9}[unit]
