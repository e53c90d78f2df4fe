"""P4's claims and tables: receive-buffer blocking in simultaneous multipath transfer.

Which number answers which claim (README.md says why): the aggregate throughput as a
share of the paths' total bandwidth, with a 64 KiB against a large receive buffer, in
each scenario (``simple``, ``three_paths``, ``cross_traffic``).

The claim (a 64 KiB buffer lowers the aggregate in ``simple``) compares two groups of
runs: a `difference` of the largest buffer's share over 64 KiB's, one value per run,
Welch's 95 % interval over the repetitions (analysis.evidence); the quick spec repeats
each point 3 times.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.claims import Claim, Comparison, StudyResult, measured
from analysis.evidence import difference
from analysis.study_tables import resolved_spec, top_flows, workload_rate, workload_rates
from testbed.core.units import parse_rate


def evaluate(paper: dict[str, Any], out: Path, res: StudyResult) -> None:
    """Fill res from the results of ``testbed study`` in out (one folder per spec)."""
    for spec_name in ("simple", "three_paths", "cross_traffic"):
        spec = resolved_spec(out / spec_name)
        flows = top_flows(out / spec_name)
        if spec is None or flows.empty:
            res.missing.append(spec_name)
            continue
        total = sum(parse_rate(p["bw"]) for p in spec["topology"]["paths"])
        key = "param:transport.rmem"
        values = sorted(flows[key].astype(str).unique()) if key in flows else [None]
        shares: dict[str, float | None] = {}
        per_run: dict[str, list[float]] = {}
        for rmem in values:
            sel = None if rmem is None else {key: rmem}
            r = workload_rate(flows, "transfer", sel)
            share = None if r is None else 100 * r / total
            label = rmem or str(spec.get("transport", {}).get("rmem", "default"))
            shares[label] = share
            per_run[label] = [100 * x / total for x in workload_rates(flows, "transfer", sel)]
            res.comparisons.append(Comparison(spec_name, f"aggregate / total bandwidth, "
                                              f"rmem {label}", None, share, "%"))
        if spec_name == "simple" and len(shares) >= 2:
            small = shares.get("64KiB")
            large = max((k for k, v in shares.items() if k != "64KiB" and v is not None),
                        key=lambda k: shares[k] or 0.0, default=None)
            res.claims.append(Claim(
                "simple", "a 64 KiB receive buffer lowers the aggregate on the 0.2 / 1 Mbit/s "
                "paths",
                [difference(f"rmem {large} - 64KiB aggregate / total bandwidth, %",
                            per_run.get("64KiB", []), per_run.get(large or "", []))],
                measured({"share_64KiB_pct": small,
                          "share_large_pct": None if large is None else shares[large]}),
                specs=(spec_name,)))
