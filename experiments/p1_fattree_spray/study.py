"""P1's claims and tables: packet spraying against single-path forwarding in a fat-tree.

Which number answers which claim (README.md says why): per forwarding policy, the short
flows' FCT, the long flows' throughput and the short flows' out-of-order share, in the
``static`` and the ``random`` scenario.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.claims import Claim, Comparison, StudyResult, measured
from analysis.study_tables import numeric, top_flows


def evaluate(paper: dict[str, Any], out: Path, res: StudyResult) -> None:
    """Fill res from the results of ``testbed study`` in out (one folder per spec)."""
    key = "param:controller.kind"
    for spec_name in ("static", "random"):
        flows = top_flows(out / spec_name)
        if flows.empty or key not in flows:
            res.missing.append(spec_name)
            continue
        by: dict[str, dict[str, float]] = {}
        for policy, g in flows.groupby(key):
            short = g[g["workload"] == "short"]
            long_ = g[g["workload"] == "long"]
            ooo = numeric(short["ooo_ratio"]) if "ooo_ratio" in short \
                else pd.Series(dtype=float)
            by[str(policy)] = {
                "short_fct_ms": float(numeric(short["fct_s"]).mean() * 1e3),
                "long_mbit": float(numeric(long_["throughput_bps"]).mean() / 1e6),
                # the paper's: share of each short flow's packets that arrive after a
                # packet sent later (sender's and receiver's captures; retransmissions
                # are not reorderings), averaged over short flows
                "short_ooo_pct": float(100 * ooo.mean()) if ooo.notna().any()
                else float("nan"),
                # RFC 4737 reordered-packet ratio at the receiver alone (counts a fast
                # retransmission with the same ms timestamp as reordered)
                "short_rfc4737_pct": float(100 * numeric(short["reordered_packets"]).sum()
                                           / max(numeric(short["data_packets"]).sum(), 1)),
            }
        paper_ooo = _paper_ooo(paper)
        for policy, m in sorted(by.items()):
            res.comparisons.append(Comparison(spec_name, f"short-flow FCT, {policy}", None,
                                              m["short_fct_ms"], "ms"))
            res.comparisons.append(Comparison(spec_name, f"long-flow throughput, {policy}",
                                              None, m["long_mbit"], "Mbit/s"))
            res.comparisons.append(Comparison(
                spec_name, f"short-flow packets out of order, {policy}",
                paper_ooo if policy == "spray" else None,
                None if math.isnan(m["short_ooo_pct"]) else m["short_ooo_pct"], "%"))
            res.comparisons.append(Comparison(
                spec_name, f"short-flow reordered packets (RFC 4737, receiver only), "
                f"{policy}", None, m["short_rfc4737_pct"], "%"))
        if "spray" in by and "single-path" in by:
            _claims(spec_name, by["spray"], by["single-path"], res)


def _paper_ooo(paper: dict[str, Any]) -> float | None:
    """The paper's out-of-order share: the first number of the first figure about it."""
    for fig in (paper.get("figures") or {}).values():
        vals = fig.get("values") or {}
        if "ooo" in json.dumps(vals) or "out" in str(fig.get("metric", "")).lower():
            for v in vals.values():
                if isinstance(v, (int, float)):
                    return float(v)
    return None


def _claims(spec_name: str, s: dict[str, float], p: dict[str, float],
            res: StudyResult) -> None:
    """The two claims of one scenario. s: spraying's numbers; p: single-path's."""
    res.claims.append(Claim(
        spec_name, "spraying's short-flow FCT is not worse than single-path's "
        "(within 10 %)", s["short_fct_ms"] <= 1.1 * p["short_fct_ms"],
        measured({"spray_ms": s["short_fct_ms"], "single_path_ms": p["short_fct_ms"]})))
    known = not (math.isnan(s["short_ooo_pct"]) or math.isnan(p["short_ooo_pct"]))
    res.claims.append(Claim(
        spec_name, "spraying delivers some short-flow packets out of order, "
        "single-path forwarding (almost) none: spray's share is at least 10x "
        "single-path's, which is at most 0.1 %",
        bool(s["short_ooo_pct"] > 0 and p["short_ooo_pct"] <= 0.1
             and s["short_ooo_pct"] >= 10 * p["short_ooo_pct"]) if known else None,
        measured({"spray_ooo_pct": s["short_ooo_pct"],
                  "single_path_ooo_pct": p["short_ooo_pct"]})))
