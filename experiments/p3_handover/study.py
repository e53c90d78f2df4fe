"""P3's claims and tables: TCP's throughput right after a vertical handover.

Which number answers which claim (README.md says why): per ``case*`` spec, what the
receiver got over the paper's averaging window after the planned handover (`window`: the
table's ``window_s``, 0-5 s when not given), beside the paper's TCP/mm, against the
ideal of the paper's eq. 2 (`ideal_rate`), computed from the link as the run's schedule
applied it (`applied_steps`), or as the spec planned it (`capacity_steps`); and the
paper's utilisation figures.

The claim ("TCP stays well below the ideal, < 80 %") is a threshold on a ratio, not a
difference: each run gives its utilisation (what the receiver got over that run's own
ideal), and the claim rests on their mean as a `level` below 80 % with Student's t 95 %
interval over the repetitions (analysis.evidence).  The quick spec runs once, so the
one-repetition rule applies: the utilisation must be at least 10 % of the line away from
80 % (below 72 %) to hold; CI runs gave 72-86 % (README.md).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.claims import Claim, Comparison, StudyResult, measured
from analysis.evidence import difference, level
from analysis.study_tables import DELIVERED, resolved_spec, run_table, window_rate
from testbed.core.units import parse_duration, parse_rate

Steps = list[tuple[float, float]]  # [(from_time_s, capacity_bps)]
# swept keys that split a case's runs into groups (each compared with the paper's row);
# the full specs also sweep SACK on and off (transport.sysctl)
GROUP_KEYS = ("transport.handover", "transport.cc", "transport.profile", "transport.sysctl")
# transport.handover -> the paper's row (paper.toml's value keys)
PAPER_ROW = {"none": "tcp-mm", "immediate-expiration": "immediate-expiration",
             "bandwidth-aware": "bandwidth-aware"}
# the orderings the paper shows, by case spec
SCHEME_CLAIMS: dict[str, list[tuple[str, str]]] = {
    "case1_wlan_to_imt": [("bandwidth-aware", "Bandwidth-Aware gets more of the ideal than "
                           "TCP/mm after a 20 Mbit/s -> 384 kbit/s hand-off")],
    "case1_imt_to_wired": [("bandwidth-aware", "Bandwidth-Aware gets more of the ideal than "
                            "TCP/mm after a 384 kbit/s -> 10 Mbit/s hand-off")],
    "case2_long_outage": [("immediate-expiration", "Immediate Expiration gets more of the "
                           "ideal than TCP/mm after a 3.5 s outage"),
                          ("bandwidth-aware", "Bandwidth-Aware gets more of the ideal than "
                           "TCP/mm after a 3.5 s outage")],
}


def capacity_steps(spec: dict[str, Any], link: str) -> Steps:
    """[(from_time_s, capacity_bps)] of one path as the spec's schedule changes it."""
    paths = {p["name"]: p for p in spec["topology"]["paths"]}
    bw = float(parse_rate(paths[link]["bw"]))
    up = True
    steps = [(0.0, bw)]
    for ev in sorted(spec.get("schedule", []), key=lambda e: parse_duration(e["at"])):
        if ev.get("link") != link:
            continue
        if "bw" in ev:
            bw = float(parse_rate(ev["bw"]))
        if "down" in ev:
            up = not ev["down"]
        if "up" in ev:
            up = bool(ev["up"])
        steps.append((parse_duration(ev["at"]), bw if up else 0.0))
    return steps


def applied_steps(spec: dict[str, Any], link: str, events: pd.DataFrame) -> Steps:
    """[(from_time_s, capacity_bps)] of one path as a run's schedule really changed it.

    events: that run's ``metrics/events`` (t_rel = when a change was applied, s after t0;
    changes as JSON).  The schedule player is a few tens of ms late under emulation; over
    a 5 s window 30 ms of a 10 Mbit/s link before the drop are 17 % of a 384 kbit/s
    ideal, so the ideal counts the link as it was.  Events that failed are left out.
    """
    paths = {p["name"]: p for p in spec["topology"]["paths"]}
    bw, up = float(parse_rate(paths[link]["bw"])), True
    steps = [(0.0, bw)]
    mine = events[(events["link"] == link) & events["error"].isna()].sort_values("t_rel")
    for t, changes in zip(mine["t_rel"], mine["changes"], strict=True):
        ch = json.loads(changes)
        bw = float(ch.get("bw_bps", bw))
        up = bool(ch.get("up", up))
        steps.append((float(t), bw if up else 0.0))
    return steps


def ideal_rate(steps: Steps, t_from: float, t_to: float) -> float:
    """The paper's eq. 2: sum(bandwidth x time) / time over [t_from, t_to)."""
    total = 0.0
    for i, (t, cap) in enumerate(steps):
        t_next = steps[i + 1][0] if i + 1 < len(steps) else math.inf
        lo, hi = max(t, t_from), min(t_next, t_to)
        if hi > lo:
            total += cap * (hi - lo)
    return total / (t_to - t_from)


def evaluate(paper: dict[str, Any], out: Path, res: StudyResult) -> None:
    """Fill res from the results of ``testbed study`` in out (one folder per spec)."""
    for spec_dir in sorted(p for p in out.iterdir() if p.is_dir() and p.name.startswith("case")):
        spec = resolved_spec(spec_dir)
        if spec is None:
            res.missing.append(spec_dir.name)
            continue
        _case(spec_dir, spec, paper_table(paper, spec_dir.name), res)
    # the paper's TCP/mm utilisation figures, by table
    for name, fig in sorted((paper.get("figures") or {}).items()):
        vals = fig.get("values") or {}
        for k, v in vals.items():
            if isinstance(v, (int, float)) and "util" in str(k).lower():
                res.comparisons.append(Comparison(fig.get("source", name), f"paper: {k}",
                                                  float(v), None, "%"))


def paper_table(paper: dict[str, Any], spec_name: str) -> dict[str, Any]:
    """The paper.toml table ([figures.*]) whose specs name this spec ({} when none)."""
    return next((f for f in (paper.get("figures") or {}).values()
                 if spec_name in (f.get("specs") or [])), {})


def window(spec: dict[str, Any], table: dict[str, Any]) -> tuple[float, float, float]:
    """(handover time, window start, window end) in s: the window the paper's table
    averages over (``window_s`` after the first handover; 0-5 s when not given), cut at
    the run's end."""
    steps = capacity_steps(spec, spec["topology"]["paths"][0]["name"])
    t_h = steps[1][0] if len(steps) > 1 else 0.0
    lo, hi = (table.get("window_s") or [0.0, 5.0])[:2]
    t_end = parse_duration(spec["duration"])
    return t_h, min(t_h + float(lo), t_end), min(t_h + float(hi), t_end)


def _case(spec_dir: Path, spec: dict[str, Any], table: dict[str, Any], res: StudyResult
          ) -> None:
    """One handover case: throughput and utilisation of the ideal per congestion control,
    beside the paper's TCP/mm (table: the paper's table for this spec)."""
    link = spec["topology"]["paths"][0]["name"]
    steps = capacity_steps(spec, link)
    if len(steps) < 2:
        return
    _t, t_h, t_to = window(spec, table)
    paper_vals = table.get("values") or {}
    ts = run_table(spec_dir, "timeseries")
    if ts.empty:  # complete runs without a timeseries table: nothing to compare
        res.missing.append(spec_dir.name)
        return
    events = run_table(spec_dir, "events")
    keys = [k for k in GROUP_KEYS if f"param:{k}" in ts]
    # what the receiver got, as the paper's throughput is: right after a rate drop the
    # sender still transmits segments the new link's queue then drops
    runs = set(ts["run_id"]) if "run_id" in ts else set()
    old = len(runs - set(ts.loc[ts["kind"] == "delivered", "run_id"])) if runs else 0
    how = "delivered: the receiver's cumulative ACKs" + (
        f" ({old} of {len(runs)} runs analysed before that series existed: sent)"
        if old else "")
    utils: dict[str, list[float]] = {}
    for group, sel in (ts.groupby([f"param:{k}" for k in keys]) if keys else [((), ts)]):
        values = dict(zip(keys, group if isinstance(group, tuple) else (group,),
                          strict=True))
        scheme = PAPER_ROW.get(str(values.get("transport.handover", "none")), "tcp-mm")
        paper_tput = (paper_vals.get("throughput_mbps") or {}).get(scheme)
        paper_util = (paper_vals.get("utilisation_pct") or {}).get(scheme)
        # per run: its rate against the ideal of the link as its schedule was applied
        per_run = []
        for rid in sorted(set(sel["run_id"])):
            ev = events[events["run_id"] == rid] if "run_id" in events else events
            r_steps = applied_steps(spec, link, ev) if len(ev) else steps
            rate_r = window_rate(spec_dir, t_h, t_to, run_filter={"run_id": rid},
                                 kinds=DELIVERED, table=ts)
            per_run.append((rate_r, ideal_rate(r_steps, t_h, t_to)))
        got = [(r, i) for r, i in per_run if r is not None and i > 0]
        rate = sum(r for r, _ in got) / len(got) if got else None
        ideal = (sum(i for _, i in got) / len(got) if got
                 else ideal_rate(steps, t_h, t_to))
        util = 100 * sum(r / i for r, i in got) / len(got) if got else None
        label = ", ".join([spec_dir.name, *(str(v) for v in values.values())])
        # the paper's orderings compare NewReno with the schemes on today's Linux
        if str(values.get("transport.cc", "reno")) == "reno" and \
                str(values.get("transport.profile", "linux")) == "linux":
            utils.setdefault(scheme, []).extend(100 * r / i for r, i in got)
        res.comparisons.append(Comparison(
            label, f"throughput {t_h:g}-{t_to:g} s", paper_tput,
            None if rate is None else rate / 1e6, "Mbit/s",
            f"paper: {scheme}; ours: {how}; ideal (eq. 2 over the link as applied, mean of "
            f"{len(got)} runs) "
            f"{ideal / 1e6:.3f} Mbit/s (as planned {ideal_rate(steps, t_h, t_to) / 1e6:.3f})"))
        over = util is not None and util > 100
        res.comparisons.append(Comparison(
            label, "utilisation of the ideal", paper_util, util, "%",
            f"paper: {scheme}" + ("; above 100 %: in the window the receiver also "
                                  "acknowledged data that crossed the link before the "
                                  "hand-off (README)" if over else "")))
        if spec_dir.name.startswith("case1_wlan_to_imt") and scheme == "tcp-mm":
            res.claims.append(Claim(
                label, "right after a 20 Mbit/s -> 384 kbit/s handover TCP stays well "
                "below the ideal (< 80 %)",
                [level("utilisation of the ideal, %", [100 * r / i for r, i in got], 80.0,
                       above=False)],
                measured({"utilisation_pct": util, "ideal_mbit": ideal / 1e6}),
                specs=(spec_dir.name,)))
    _scheme_claims(spec_dir.name, paper_vals, utils, res)


def _scheme_claims(name: str, paper_vals: dict[str, Any], utils: dict[str, list[float]],
                   res: StudyResult) -> None:
    """The paper's orderings of the schemes in one case: Bandwidth-Aware above TCP/mm
    (Tables 2 and 3, and the others), Immediate Expiration above TCP/mm after the long
    outage (Table 4); each with our ratio of mean utilisations beside the paper's."""
    paper_tput = paper_vals.get("throughput_mbps") or {}
    for scheme, text in SCHEME_CLAIMS.get(name.split("-")[0], []):
        if scheme not in utils or "tcp-mm" not in utils:
            continue
        ours, base = utils[scheme], utils["tcp-mm"]
        ratio = (sum(ours) / len(ours)) / (sum(base) / len(base)) if ours and base and \
            sum(base) > 0 else None
        p_ratio = (paper_tput[scheme] / paper_tput["tcp-mm"]
                   if paper_tput.get(scheme) and paper_tput.get("tcp-mm") else None)
        res.claims.append(Claim(
            name, text, [difference(f"utilisation of the ideal: {scheme} - TCP/mm, %",
                                    base, ours)],
            measured({"ratio_to_tcp_mm": ratio, "paper_ratio_to_tcp_mm": p_ratio,
                      f"utilisation_pct_{scheme}": sum(ours) / len(ours) if ours else None,
                      "utilisation_pct_tcp_mm": sum(base) / len(base) if base else None}),
            specs=(name,)))
