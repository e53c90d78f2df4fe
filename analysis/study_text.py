"""A study report's words: a claim's verdict as a sentence, ratios and measured values.

Pure functions from `analysis.claims` / `analysis.evidence` values to text, so that the
report (`analysis.study_report`) never shows a raw dictionary or JSON:

* `verdict_sentence` -- "Holds: the 95 % interval of ... lies wholly above 0 (n = 3 / 3)."
* `ratio_text` -- ours over the paper's ("x0.82"), or why there is none;
* `measured_text` -- a claim's measured values as "name = value" phrases;
* `number` -- a number to 4 significant digits ("—" for none).
"""

from __future__ import annotations

import math

from analysis.claims import Claim
from analysis.evidence import FAILS, HOLDS, INCONCLUSIVE, Estimate


def number(v: float | None) -> str:
    """v to 4 significant digits; "—" for None or NaN."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{v:.4g}"


def ratio_text(paper: float | None, ours: float | None) -> str:
    """Ours over the paper's as "x0.82"; "—" when either is missing or the paper's is 0."""
    if paper is None or ours is None or math.isnan(ours) or paper == 0:
        return "—"
    return f"x{ours / paper:.3g}"


def measured_text(values: dict[str, float]) -> str:
    """A claim's measured values as "best tcp mbit = 3.71; ..." ("—" when none)."""
    return "; ".join(f"{k.replace('_', ' ')} = {number(v)}" for k, v in values.items()) or "—"


def _part(e: Estimate) -> str:
    """One part of a claim's evidence in words."""
    ref = "0" if e.line is None else number(e.line)
    n = " / ".join(map(str, e.n))
    if e.verdict not in (HOLDS, FAILS, INCONCLUSIVE):
        return f"{e.quantity}: no runs to measure it"
    if e.low is not None and e.high is not None:
        where = {HOLDS: f"lies wholly on the claimed side of {ref}",
                 FAILS: f"lies wholly on the other side of {ref}",
                 INCONCLUSIVE: f"contains {ref}, so our runs cannot tell"}[e.verdict]
        return (f"{e.quantity} is {number(e.value)}, and its 95 % interval "
                f"[{number(e.low)}, {number(e.high)}] {where} (n = {n})")
    # how far from the reference, in words: a level's distance from its line; a difference
    # "a - b" relative to b's mean (none when that is 0: infinite)
    rel = ""
    if e.line is not None and e.line != 0 and math.isfinite(e.value):
        side = "above" if e.value > e.line else "below"
        rel = f" ({abs(e.value - e.line) / abs(e.line):.0%} {side} the line {ref})"
    elif e.line is None and e.relative is not None and math.isfinite(e.relative):
        rel = f" ({e.relative:+.0%} of the second term's mean)"
    where = {HOLDS: "at least 10 % away, on the claimed side",
             FAILS: "at least 10 % away, on the other side",
             INCONCLUSIVE: "less than 10 % away, too close to tell"}[e.verdict]
    return (f"{e.quantity} is {number(e.value)}{rel}: one run, so no interval; it is "
            f"{where} of {ref} (n = {n})")


def verdict_sentence(claim: Claim) -> str:
    """The claim's verdict and why, in words ("Holds: ...; ...")."""
    head = claim.verdict[:1].upper() + claim.verdict[1:]
    if not claim.evidence:
        return f"{head}: no runs to measure it."
    return f"{head}: " + "; ".join(_part(e) for e in claim.evidence) + "."
