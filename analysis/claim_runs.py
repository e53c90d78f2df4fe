"""Which runs a study's claim rests on, and whether the emulation kept up in them.

A study names, per claim, the spec folders its evidence is read from (`Claim.specs`);
`study_verdicts` reads every spec folder's runs once (their fidelity verdicts, as the
study report's banner shows them) and `rests_on` counts, for one claim, the verdicts of
the runs of its spec folders.  A claim whose runs include one that did not keep up says
so next to its verdict (`RunsFidelity.text`): the verdict itself is never changed (it is
what the numbers say), but a reader sees at once which verdict stands on runs to read
with care (``warn``) or not to trust (``fail``).  The count is per spec folder: a claim
that reads some of a folder's runs (one sweep point) is shown with all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.core import safefiles
from testbed.core.errors import InputError
from testbed.results.bundle import BROKEN
from testbed.results.summary import runs_frame

Verdicts = dict[str, list[tuple[str, str, list[str]]]]  # spec -> (run id, verdict, reasons)
ORDER = ("ok", "warn", "fail", "unknown")


def study_verdicts(out: Path) -> tuple[Verdicts, list[str]]:
    """Every spec folder's runs with their fidelity verdicts and reasons, and notes on
    what was skipped (a spec folder or summary that is a link is named, never followed;
    a broken run counts as ``unknown``: its files are not as it wrote them)."""
    found: Verdicts = {}
    skipped: list[str] = []
    folders = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    for name in folders:
        if (out / name).is_symlink():
            skipped.append(f"skipped {out / name}: a symbolic link (not followed)")
            continue
        if safefiles.check(out, out / name, "dir") is not None:
            continue  # not a spec folder (a file): study tables skip it too
        if safefiles.file_in(out, f"{name}/summary.parquet", skipped) is None:
            continue
        try:  # as the bundles say now, as each spec's report reads them
            s = runs_frame(out / name)
        except (OSError, ValueError, InputError):
            skipped.append(f"skipped {out / name}: its runs cannot be read")
            continue
        rows = []
        for _, r in s.iterrows():
            v, reasons = r.get("fidelity"), r.get("fidelity_reasons")
            why = reasons.split("; ") if isinstance(reasons, str) and reasons else []
            if r.get("status") == BROKEN:
                v, why = "unknown", ["the run is broken (testbed query DIR names why)"]
            rows.append((str(r.get("run_id")), v if v in ORDER else "unknown", why))
        found[name] = rows
    return found, skipped


@dataclass
class RunsFidelity:
    """The runs one claim rests on: counts per fidelity verdict, the others named."""

    specs: tuple[str, ...]
    counts: dict[str, int] = field(default_factory=dict)
    not_ok: list[str] = field(default_factory=list)  # "spec/run: verdict (first reason)"
    absent: list[str] = field(default_factory=list)  # named specs without runs

    @property
    def runs(self) -> int:
        return sum(self.counts.values())

    @property
    def worst(self) -> str:
        """fail, warn, unknown or ok: the worst verdict among the runs ("unknown" if none)."""
        for v in ("fail", "warn", "unknown"):
            if self.counts.get(v):
                return v
        return "ok" if self.runs else "unknown"

    def text(self) -> str:
        """In words: "12 runs of paths: all ok", or which are not, and why."""
        where = ", ".join(self.specs) or "no spec named"
        if not self.runs:
            return f"no runs of {where}"
        runs = f"{self.runs} run{'s' if self.runs > 1 else ''} of {where}"
        if self.worst == "ok":
            return f"{runs}: {'all ok' if self.runs > 1 else 'ok'}"
        counts = ", ".join(f"{self.counts[v]} {v}" for v in ORDER if self.counts.get(v))
        head = f"{runs}: {counts}"
        if self.worst == "fail":
            head += " -- the verdict rests on runs whose numbers are not to be trusted"
        elif self.worst == "warn":
            head += " -- read the verdict with care"
        return head + "".join(f"; {x}" for x in self.not_ok[:4]) + (
            f"; and {len(self.not_ok) - 4} more" if len(self.not_ok) > 4 else "")

    def record(self) -> dict[str, Any]:
        """As JSON-ready values (claims.json's ``runs``)."""
        return {"specs": list(self.specs), "count": self.runs,
                **{v: self.counts.get(v, 0) for v in ORDER}, "worst": self.worst,
                "not_ok": list(self.not_ok)}


def rests_on(verdicts: Verdicts, specs: Sequence[str]) -> RunsFidelity:
    """The fidelity of the runs of specs (spec folder names) in verdicts."""
    res = RunsFidelity(tuple(specs))
    for spec in specs:
        rows = verdicts.get(spec)
        if not rows:
            res.absent.append(spec)
            continue
        for run, v, why in rows:
            res.counts[v] = res.counts.get(v, 0) + 1
            if v != "ok":  # a reason may already say its level ("warn: ...")
                first = why[0] if why else ""
                res.not_ok.append(f"{spec}/{run}: " + (
                    first if first.startswith(f"{v}:") else
                    f"{v} ({first})" if first else v))
    return res
