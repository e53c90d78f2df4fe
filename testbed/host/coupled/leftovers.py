"""What the testbed's BPF congestion controls left in the kernel: their struct_ops
registrations, programs and maps (by the names the sources give them).

    python -m testbed.host.coupled.leftovers [--wait SECONDS] [--baseline FILE]

prints one JSON object: ``struct_ops``, ``programs`` and ``maps`` still present (name and
id each), and ``waited_s``: how long it waited for them to go (the kernel frees a
control's programs and maps once no socket uses it any more, e.g. after a network's
namespaces are deleted).  With ``--baseline`` (an earlier output of this command) what
was there already is listed under ``before`` instead and does not count: scripts/vm_stage
takes one before the studies, after the integration tests (whose SIGKILL test leaves a
coupled control in kernel memory for minutes: docs/coupled_cc.md).  Exit 0 when
nothing (new) is left, 1 otherwise, 2 (with ``error``) when bpftool cannot list them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from testbed.spec.model import BPF_CCS

# the maps the sources declare (bpf/coupled.h, bpf/handover.h)
MAP_NAMES = {"conns", "trace", "trace_seq", "ho_signal", "ho_socks", "ho_log", "ho_log_seq"}


class ListingError(Exception):
    """bpftool could not list what the kernel holds (so nothing can be said)."""


def _bpftool(*args: str) -> list[dict[str, Any]]:
    try:
        res = subprocess.run(["bpftool", "-j", *args], capture_output=True, text=True,
                             check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ListingError(f"bpftool {' '.join(args)}: {exc}") from exc
    if res.returncode != 0:
        raise ListingError(f"bpftool {' '.join(args)}: exit {res.returncode}: "
                           f"{res.stderr.strip()[-200:]}")
    try:
        data = json.loads(res.stdout) if res.stdout.strip() else []
    except ValueError as exc:
        raise ListingError(f"bpftool {' '.join(args)}: not JSON ({exc})") from exc
    return data if isinstance(data, list) else [data]


def ours(struct_ops: list[dict[str, Any]], progs: list[dict[str, Any]],
         maps: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The entries of bpftool's lists that belong to the testbed's controls."""
    prefixes = tuple(f"{n}_"[:15] for n in BPF_CCS)
    return {
        "struct_ops": [{"name": s.get("name"), "id": s.get("id")} for s in struct_ops
                       if s.get("name") in BPF_CCS],
        "programs": [{"name": p.get("name"), "id": p.get("id")} for p in progs
                     if p.get("type") == "struct_ops"
                     and str(p.get("name", "")).startswith(prefixes)],
        "maps": [{"name": m.get("name"), "id": m.get("id")} for m in maps
                 if m.get("name") in MAP_NAMES],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wait", type=float, default=0.0,
                    help="seconds to wait for the kernel to free them")
    ap.add_argument("--baseline", default=None,
                    help="an earlier output of this command: what it lists does not count")
    a = ap.parse_args(argv)
    seen: set[tuple[str, int]] = set()
    if a.baseline:
        try:
            text = Path(a.baseline).read_text()
            base = json.loads(text.strip().splitlines()[-1])
            seen = {(kind, int(e["id"])) for kind in ("struct_ops", "programs", "maps")
                    for e in base.get(kind, [])}
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            print(json.dumps({"error": f"baseline {a.baseline}: {exc}"}))
            return 2
    t0 = time.monotonic()
    while True:
        try:
            left = ours(_bpftool("struct_ops", "show"), _bpftool("prog", "show"),
                        _bpftool("map", "show"))
        except ListingError as exc:
            print(json.dumps({"error": str(exc)}))
            return 2
        before = {k: [e for e in v if (k, e["id"]) in seen] for k, v in left.items()}
        left = {k: [e for e in v if (k, e["id"]) not in seen] for k, v in left.items()}
        waited = time.monotonic() - t0
        if not any(left.values()) or waited >= a.wait:
            break
        time.sleep(2.0)
    print(json.dumps({**left, "waited_s": round(waited, 1),
                      **({"before": before} if a.baseline else {})}))
    return 0 if not any(left.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
