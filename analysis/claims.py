"""What a study's evaluation returns: the paper's numbers next to ours, and its claims.

A study (``experiments/<study>/study.py``, found by `analysis.study_registry`) fills a
`StudyResult` with `Comparison` rows (the paper's number next to ours) and `Claim` s (the
paper's qualitative finding, the evidence our runs give for it -- `analysis.evidence`
estimates with their repetitions and 95 % intervals -- the measured values, and the spec
folders it is read from, whose runs' fidelity `analysis.claim_runs` shows next to the
verdict).  A claim's verdict (holds, does not hold, inconclusive, no data) is derived
from its evidence and never bent: when our runs do not show it, or cannot tell, the
verdict says so.
A study may add `StudyTable` s (a table of the paper laid out as the paper does).
`load_paper` reads a study folder's ``paper.toml`` (schema: experiments/README.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.claim_runs import RunsFidelity, Verdicts
from analysis.evidence import Estimate, combine
from testbed.core import safefiles
from testbed.core.compat import tomllib
from testbed.core.errors import InputError


@dataclass
class Comparison:
    """One number of the paper next to ours. unit: of both values; note: how ours is made."""

    figure: str
    quantity: str
    paper: float | None
    ours: float | None
    unit: str
    note: str = ""


@dataclass
class Claim:
    """A qualitative claim and the evidence it rests on (every part must hold)."""

    figure: str
    text: str
    evidence: list[Estimate]
    measured: dict[str, float] = field(default_factory=dict)
    note: str = ""
    specs: tuple[str, ...] = ()  # the spec folders its evidence is read from
    runs: RunsFidelity | None = None  # their runs' fidelity (`analysis.claim_runs`)

    @property
    def verdict(self) -> str:
        """holds, does not hold, inconclusive or no data (`analysis.evidence.combine`)."""
        return combine([e.verdict for e in self.evidence])

    def record(self) -> dict[str, Any]:
        """The claim as JSON-ready values (claims.json, the reproduction record)."""
        return {"figure": self.figure, "claim": self.text, "verdict": self.verdict,
                "evidence": [e.record() for e in self.evidence], "measured": self.measured,
                "runs": None if self.runs is None else self.runs.record()}


@dataclass
class StudyTable:
    """A table of the paper laid out as the paper does, our values beside its (text cells).

    title: its heading; columns: the header; rows: one list of cell texts per row.
    """

    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""


@dataclass
class StudyResult:
    """Everything the study report shows."""

    study: str
    title: str
    comparisons: list[Comparison] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    tables: list[StudyTable] = field(default_factory=list)
    # every spec folder's runs with their fidelity, and what was skipped (`study_verdicts`)
    verdicts: Verdicts = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


def load_paper(study: Path) -> dict[str, Any]:
    """The study's paper.toml.

    study: the study folder; raises `InputError` when the file is absent or not TOML.
    """
    why: list[str] = []
    f = safefiles.file_in(study, "paper.toml", why)
    if f is None:  # absent, or a link / not a regular file: never followed
        raise InputError(why[0] if why else f"{study}: no paper.toml (the paper's numbers)")
    try:
        return tomllib.loads(safefiles.read_text(f))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{f}: {exc}") from None


def paper_id(paper: dict[str, Any]) -> str:
    """The study id a paper.toml gives (``[paper] id``, upper case; "" when absent)."""
    return str((paper.get("paper") or {}).get("id", "")).upper()


def paper_figure(paper: dict[str, Any], key: str) -> dict[str, Any]:
    """The ``[figures.<key>]`` table of a paper.toml ({} when absent)."""
    return (paper.get("figures") or {}).get(key, {})


def measured(values: dict[str, float | None]) -> dict[str, float]:
    """A claim's measured values: rounded to 4 places, unknown ones (None, NaN) left out."""
    return {k: round(v, 4) for k, v in values.items() if v is not None and not math.isnan(v)}
