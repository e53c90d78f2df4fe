"""Whether a study's runs show a claim: estimates with 95 % intervals, and verdicts.

A study's claim rests on numbers measured once per run (one repetition of one sweep
point).  Three kinds of evidence, each an `Estimate` with its own verdict:

* `difference(quantity, low, high)`: the claim says the mean of ``high`` exceeds the
  mean of ``low`` ("two subflows are faster than one").  The estimate is
  mean(high) - mean(low) with **Welch's** 95 % interval (two independent groups, variances
  not assumed equal, Welch-Satterthwaite degrees of freedom).
* `level(quantity, values, line, above)`: the claim says a quantity lies above (or
  below) a line ("TCP gets < 80 % of the ideal").  The estimate is the mean with
  **Student's t** 95 % interval (n - 1 degrees of freedom).
* `proportion(quantity, k, trials, line, above)`: a share of independent trials (pings
  lost) against a line, with the **Wilson score** 95 % interval.

`mean_interval(values)` is the plain mean with its Student t 95 % interval, no claim
attached (the sweep report's bars and bands).

Verdicts (`HOLDS`, `FAILS`, `INCONCLUSIVE`, `NO_DATA`): a claim *holds* when the interval
lies wholly on the claimed side of 0 (of the line), *does not hold* when it lies wholly
on the other side, and is *inconclusive* when it contains 0 (the line).  With fewer than
two repetitions on a side there is no interval: the difference (the distance from the
line) must then be at least `MIN_RELATIVE` (10 %) of the reference -- the ``low`` group's
mean, or the line -- to decide either way; anything smaller is inconclusive.  Missing data
gives *no data*.  `combine` turns the verdicts of a claim's parts into the claim's one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

HOLDS = "holds"
FAILS = "does not hold"
INCONCLUSIVE = "inconclusive"
NO_DATA = "no data"
LEVEL = 0.95
MIN_RELATIVE = 0.10  # on one repetition: the smallest relative difference that decides
Z95 = 1.959963984540054  # the normal distribution's 97.5 % quantile (Wilson's interval)


@dataclass(frozen=True)
class Estimate:
    """One measured quantity a claim rests on, its 95 % interval and what it says.

    quantity: what is estimated (names the sides of a difference and the unit);
    value: the point estimate (NaN: no data); low, high: the 95 % interval (None on one
    repetition); n: repetitions per side (one entry for a level); method: how the
    interval was made; verdict: one of the verdict words; relative: value (its distance
    from the line) relative to the reference; line: a level's line.
    """

    quantity: str
    value: float
    low: float | None
    high: float | None
    n: tuple[int, ...]
    method: str
    verdict: str
    relative: float | None = None
    line: float | None = None

    def record(self) -> dict[str, Any]:
        """As JSON-ready values (NaN and infinities as None), rounded to 4 places."""
        def r(v: float | None) -> float | None:
            return None if v is None or not math.isfinite(v) else round(v, 4)
        return {"quantity": self.quantity, "value": r(self.value), "ci95": (
                    None if self.low is None else [r(self.low), r(self.high)]),
                "n": list(self.n), "method": self.method, "verdict": self.verdict,
                "relative": r(self.relative), "line": r(self.line)}


def combine(verdicts: Sequence[str]) -> str:
    """A claim's verdict from its parts': every part must hold for the claim to hold.

    A part that does not hold decides (`FAILS`); else a part without data (`NO_DATA`);
    else an inconclusive part (`INCONCLUSIVE`); no parts at all: `NO_DATA`.
    """
    for v in (FAILS, NO_DATA, INCONCLUSIVE):
        if v in verdicts:
            return v
    return HOLDS if verdicts else NO_DATA


def _beta_cf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_cf(a, b, x) / a
    return 1.0 - front * _beta_cf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t distribution with df (> 0, may be fractional) degrees."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p quantile (0 < p < 1) of Student's t with df degrees of freedom (bisection)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile: p={p} must be in (0, 1) and df={df} > 0")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def _mean_var(xs: Sequence[float]) -> tuple[float, float]:
    """Mean and sample variance (n - 1 in the denominator; 0 for one value)."""
    m = sum(xs) / len(xs)
    return m, (sum((x - m) ** 2 for x in xs) / (len(xs) - 1) if len(xs) > 1 else 0.0)


def _side(low: float, high: float, zero: float) -> str:
    """The verdict of an interval [low, high] for a claim that says "above zero"."""
    if low > zero:
        return HOLDS
    if high < zero:
        return FAILS
    return INCONCLUSIVE


def _relative(delta: float, ref: float) -> float:
    """delta relative to |ref|; +-inf when ref is 0 and delta is not."""
    if ref != 0:
        return delta / abs(ref)
    return 0.0 if delta == 0 else math.copysign(math.inf, delta)


def _one_repetition(relative: float) -> str:
    if relative >= MIN_RELATIVE:
        return HOLDS
    if relative <= -MIN_RELATIVE:
        return FAILS
    return INCONCLUSIVE


def _clean(xs: Sequence[float | None]) -> list[float]:
    return [float(x) for x in xs if x is not None and math.isfinite(float(x))]


def difference(quantity: str, low: Sequence[float | None], high: Sequence[float | None]
               ) -> Estimate:
    """The claim "mean(high) > mean(low)": mean(high) - mean(low), Welch's interval.

    quantity: names it ("two - one subflow, kB/s"); low, high: one value per run (None
    and NaN are left out).  relative: the difference over mean(low).
    """
    a, b = _clean(low), _clean(high)
    n = (len(a), len(b))
    if not a or not b:
        return Estimate(quantity, math.nan, None, None, n, "no runs", NO_DATA)
    (ma, va), (mb, vb) = _mean_var(a), _mean_var(b)
    d = mb - ma
    rel = _relative(d, ma)
    if min(n) < 2:
        return Estimate(quantity, d, None, None, n,
                        f"one repetition: decided when at least {MIN_RELATIVE:.0%} apart",
                        _one_repetition(rel), rel)
    sa, sb = va / n[0], vb / n[1]
    se = math.sqrt(sa + sb)
    if se == 0:
        return Estimate(quantity, d, d, d, n, "Welch t (no spread: interval is the value)",
                        _side(d, d, 0.0), rel)
    df = (sa + sb) ** 2 / (sa ** 2 / (n[0] - 1) + sb ** 2 / (n[1] - 1))
    h = t_quantile(0.5 + LEVEL / 2, df) * se
    return Estimate(quantity, d, d - h, d + h, n, f"Welch t, df {df:.1f}",
                    _side(d - h, d + h, 0.0), rel)


def mean_interval(values: Sequence[float | None]) -> tuple[float, float | None,
                                                            float | None, int]:
    """The mean of values (None and NaN left out) with its Student t 95 % interval.

    Returns (mean, low, high, n): mean NaN when no value is left; low and high None with
    fewer than two values (one run has no interval).
    """
    xs = _clean(values)
    if not xs:
        return math.nan, None, None, 0
    m, v = _mean_var(xs)
    if len(xs) < 2:
        return m, None, None, 1
    h = t_quantile(0.5 + LEVEL / 2, len(xs) - 1) * math.sqrt(v / len(xs))
    return m, m - h, m + h, len(xs)


def level(quantity: str, values: Sequence[float | None], line: float, above: bool
          ) -> Estimate:
    """The claim "the mean is above (above=True) or below the line": Student's t interval.

    quantity: names it; values: one per run (None and NaN left out); line: the threshold.
    relative: (mean - line) / |line|, signed so that positive means on the claimed side.
    """
    m, lo, hi, count = mean_interval(values)
    n = (count,)
    if not count:
        return Estimate(quantity, math.nan, None, None, n, "no runs", NO_DATA, line=line)
    sign = 1.0 if above else -1.0
    rel = sign * _relative(m - line, line)
    if lo is None or hi is None:
        return Estimate(quantity, m, None, None, n,
                        f"one repetition: decided when at least {MIN_RELATIVE:.0%} from the "
                        "line", _one_repetition(rel), rel, line)
    verdict = _side(lo, hi, line) if above else _side(-hi, -lo, -line)
    return Estimate(quantity, m, lo, hi, n, f"Student t, df {count - 1}", verdict, rel,
                    line)


def proportion(quantity: str, k: int, trials: int, runs: int, line: float, above: bool
               ) -> Estimate:
    """The claim "the share k/trials (in %) is above (or below) line %": Wilson's interval.

    quantity: names it; k: trials with the outcome; trials: all of them, pooled over runs
    (independent trials, e.g. pings under random loss); runs: how many runs they came
    from (reported as n); line: the threshold in %.
    """
    if trials <= 0:
        return Estimate(quantity, math.nan, None, None, (runs,), "no trials", NO_DATA,
                        line=line)
    p, z2 = k / trials, Z95 ** 2
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = Z95 / (1 + z2 / trials) * math.sqrt(p * (1 - p) / trials
                                                + z2 / (4 * trials ** 2))
    lo, hi = 100 * max(0.0, centre - half), 100 * min(1.0, centre + half)
    verdict = _side(lo, hi, line) if above else _side(-hi, -lo, -line)
    rel = (1.0 if above else -1.0) * _relative(100 * p - line, line)
    return Estimate(quantity, 100 * p, lo, hi, (runs,), f"Wilson score, {trials} trials",
                    verdict, rel, line)
