"""Did a run do what its spec asked?  The problems that make a finished run ``failed``.

A run whose traffic phase ended without an exception can still have gone wrong: a flow
that did not finish (an error, or still sending when the run ended), a schedule event
that was not applied, a capture whose tcpdump died, a sampler that never took a
sample.  Such a run is ``failed`` with every problem named (docs/spec.md, "Run
status"); its bundle keeps everything written so far.  What only lowers confidence
(packets a capture dropped, a late event, a saturated CPU) is the fidelity verdict's
business (`analysis.fidelity`), not a failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def flow_problems(flows: Mapping[str, Any] | None) -> list[str]:
    """From ``metadata.json``'s ``flows`` summary (count, failed, errors)."""
    if not flows or not flows.get("failed"):
        return []
    errors = "; ".join(str(e) for e in flows.get("errors", [])[:3])
    return [f"{flows['failed']} of {flows.get('count', '?')} flows did not finish"
            + (f" ({errors})" if errors else "")]


def schedule_problems(planned_at: Iterable[float], applied: Iterable[Mapping[str, Any]],
                      t0: float, t_end: float) -> list[str]:
    """planned_at: each schedule event's offset (s); applied: ``events.jsonl`` records;
    t0, t_end: the run's time origin and the end of its traffic phase (an event planned
    after the run ended, because every flow had finished, is not missing)."""
    due = sorted(at for at in planned_at if t0 + at <= t_end)
    recs = list(applied)
    failed = [r for r in recs if r.get("error")]
    out = []
    if failed:
        r = failed[0]
        out.append(f"{len(failed)} schedule event(s) failed (first: link {r.get('link')} at "
                   f"{float(r.get('t_planned', t0)) - t0:.3f}s: {r.get('error')})")
    done = len(recs)
    if done < len(due):
        out.append(f"{len(due) - done} of {len(due)} schedule event(s) due before the run "
                   f"ended were not applied (first missing at {due[done]:g}s)")
    return out


def capture_problems(captures: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """From ``metadata.json``'s ``captures`` (tcpdump's closing counts per file): a
    capture without closing counts did not end cleanly (tcpdump died or was killed)."""
    bad = sorted(name for name, st in (captures or {}).items()
                 if not isinstance(st, Mapping) or st.get("captured") is None)
    if not bad:
        return []
    return [f"capture {bad[0]} did not end cleanly (tcpdump printed no closing counts)"
            + (f", and {len(bad) - 1} more" if len(bad) > 1 else "")]


def sampler_problems(samplers: Iterable[Mapping[str, Any]] | None) -> list[str]:
    """From ``metadata.json``'s ``samplers``: a sampler that took no sample failed."""
    out = []
    for s in samplers or []:
        if not s.get("samples"):
            out.append(f"the cwnd sampler on {s.get('host')} took no sample "
                       f"({s.get('errors', 0)} errors)")
    return out


def run_problems(meta: Mapping[str, Any], planned_at: Iterable[float],
                 applied: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every problem that makes this run ``failed``; [] for a run that did its job.

    meta: the run's metadata (``disk_full``, ``flows``, ``captures``, ``samplers``,
    ``t0``, ``t_traffic_end``); planned_at, applied: as for `schedule_problems`.
    """
    out = [str(meta["disk_full"])] if meta.get("disk_full") else []
    out += flow_problems(meta.get("flows"))
    t0, t_end = meta.get("t0"), meta.get("t_traffic_end")
    if t0 is not None and t_end is not None:
        out += schedule_problems(planned_at, applied, float(t0), float(t_end))
    out += capture_problems(meta.get("captures"))
    out += sampler_problems(meta.get("samplers"))
    return out
