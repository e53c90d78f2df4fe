"""How evenly traffic splits over equal-cost ports: chi-square test against uniform.

Pure and dependency-free (no scipy): the chi-square survival function for an integer
number of degrees of freedom has a closed form through ``math.erfc`` and a finite sum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def chi2_sf(x: float, dof: int) -> float:
    """P(X >= x) for X ~ chi-square with dof (>= 1, integer) degrees of freedom.

    x: the statistic; dof: degrees of freedom.
    """
    if dof < 1 or int(dof) != dof:
        raise ValueError(f"dof must be a positive integer, got {dof!r}")
    if x <= 0:
        return 1.0
    half = x / 2.0
    if dof % 2 == 0:
        term, total = 1.0, 1.0
        for i in range(1, dof // 2):
            term *= half / i
            total += term
        return min(1.0, math.exp(-half) * total)
    # odd dof: Q(1/2, x/2) = erfc(sqrt(x/2)), then Q(s+1, y) = Q(s, y) + y^s e^-y / Gamma(s+1)
    result = math.erfc(math.sqrt(half))
    term = math.sqrt(half) * math.exp(-half) / math.gamma(1.5)  # y^(1/2) e^-y / Gamma(3/2)
    for i in range(1, (dof + 1) // 2):
        result += term
        term *= half / (i + 0.5)
    return min(1.0, result)


def chi_square_uniform(counts: Sequence[int]) -> tuple[float, float]:
    """Chi-square goodness of fit of counts against a uniform split.

    counts: observations per category (at least two categories, positive total).
    Returns (statistic, p-value).
    """
    if len(counts) < 2:
        raise ValueError("need at least two categories")
    total = sum(counts)
    if total <= 0:
        raise ValueError("no observations")
    expected = total / len(counts)
    stat = sum((c - expected) ** 2 / expected for c in counts)
    return stat, chi2_sf(stat, len(counts) - 1)
