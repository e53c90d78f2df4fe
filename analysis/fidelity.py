"""Did the emulation keep up?  A fidelity verdict for one run: ``ok``, ``warn`` or ``fail``.

Every number a run reports rests on links that delivered their configured rate and delay,
events that happened when planned, and a forwarding path that only reorders where the
experiment asks for it.  `assess` checks each from what the run recorded
(``metadata.json``: ``fidelity_raw``, ``readiness``, ``captures``, ``controller``) and
from its metrics tables (flows, ping, events).  Each check gives ``ok``, ``warn`` or
``fail`` with a reason naming the measured and the configured value; the verdict is the
worst of them.  A check that had nothing to measure is left out (and says so in
``checks``), never counted as ``ok`` by a zero.  Thresholds are `THRESHOLDS`; the
table in docs/fidelity.md is generated from the same values and tested against them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from testbed.spec.linkshape import BURST_MIN_BYTES

OK, WARN, FAIL = "ok", "warn", "fail"
_RANK = {OK: 0, WARN: 1, FAIL: 2}

# (warn, fail) limits; each is documented in docs/fidelity.md ("Thresholds")
THRESHOLDS: dict[str, tuple[float, float]] = {
    # achieved / configured rate of a link direction whose queue overflowed (it was
    # saturated): below these, the link did not deliver what it was configured to
    "rate_ratio": (0.90, 0.70),
    # peak rate / what the shaper may let through (the rate in force, 0 while the link is
    # down, plus its token bucket over the rate window) of a link direction, per schedule
    # phase: above these, the link carried more than it was shaped to
    "rate_over": (1.10, 1.50),
    # minimum ping RTT minus the configured RTT, in units of the tolerance 5 % + 2 ms
    "rtt_excess_tol": (1.0, 5.0),
    # first ping RTT, same units (a first packet that waited for ARP or an upcall)
    "first_rtt_excess_tol": (1.0, 5.0),
    # schedule events applied this late (ms)
    "event_late_ms": (50.0, 500.0),
    # share of the traffic phase the busiest CPU was >= 95 % busy
    "cpu_saturated_share": (0.25, 0.75),
    # how busy the busiest CPU was on average over the traffic phase (P0's quick runs in
    # the TCG VM, whose saturated links delivered their full rate: 0.66-0.83)
    "cpu_busiest_mean": (0.85, 0.95),
    # data segments that arrived after a segment sent later, where the forwarding
    # cannot reorder (every policy but spraying): worst flow with >= 100 segments
    "emulator_ooo_ratio": (0.001, 0.01),
}
RTT_TOL_PCT, RTT_TOL_MS = 5.0, 2.0
MIN_OOO_SEGMENTS = 100
REORDERING_POLICIES = {"spray"}   # forwarding that reorders on purpose


def _grade(value: float, check: str, higher_is_worse: bool = True) -> str:
    warn, fail = THRESHOLDS[check]
    if higher_is_worse:
        return FAIL if value > fail else WARN if value > warn else OK
    return FAIL if value < fail else WARN if value < warn else OK


def rtt_tolerance_ms(base_ms: float) -> float:
    """How far a measured RTT may exceed the configured one: 5 % + 2 ms."""
    return base_ms * RTT_TOL_PCT / 100 + RTT_TOL_MS


class _Verdict:
    def __init__(self) -> None:
        self.checks: dict[str, Any] = {}
        self.reasons: list[tuple[str, str]] = []

    def add(self, level: str, reason: str) -> None:
        if level != OK:
            self.reasons.append((level, reason))

    def result(self) -> dict[str, Any]:
        worst = max((lvl for lvl, _ in self.reasons), key=_RANK.__getitem__, default=OK)
        ordered = sorted(self.reasons, key=lambda r: -_RANK[r[0]])
        return {"verdict": worst, "reasons": [f"{lvl}: {text}" for lvl, text in ordered],
                "checks": self.checks}


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def _phases(link: Mapping[str, Any], scheduled: bool) -> list[dict[str, Any]] | None:
    """The stretches of a link direction to judge, each with bw_bps (in force), up,
    burst_bytes and peak_bps: the monitor's phases, or the whole run as one.  None: a link
    the schedule changes, recorded before phases were (its peak is not comparable to one
    rate)."""
    if link.get("phases"):
        return list(link["phases"])
    if scheduled:
        return None
    return [{"bw_bps": link.get("bw_bps"), "up": True, "burst_bytes": link.get("burst_bytes"),
             "peak_bps": link.get("peak_bps"), "from_s": None, "to_s": None}]


def _when(ph: Mapping[str, Any]) -> str:
    if ph.get("from_s") is None:
        return ""
    return f" from {_num(ph['from_s']):.1f} to {_num(ph['to_s']):.1f} s"


def check_links(v: _Verdict, raw: Mapping[str, Any], scheduled: set[str] | None = None
                ) -> None:
    """Each shaped link direction: whether it carried its rate when saturated (its queue
    overflowed: the best phase's peak / the rate then in force, ``rate_ratio``), and
    whether it carried more than it was shaped to in any phase (``rate_over``).
    scheduled: the links a schedule changed (from the events table)."""
    window = _num(raw.get("rate_window_s")) or 1.0
    rows, over = [], []
    for link in raw.get("links") or []:
        name, egress = link.get("link"), link.get("egress")
        phases = _phases(link, name in (scheduled or set()))
        if phases is None:
            continue
        judged = []
        for ph in phases:
            bw, peak = _num(ph.get("bw_bps")), _num(ph.get("peak_bps"))
            if bw is None or peak is None:  # no rate limit, or too short to measure
                continue
            up = ph.get("up", True) is not False
            # a record without its token bucket: one frame, the least a link has
            burst = _num(ph.get("burst_bytes")) or BURST_MIN_BYTES
            allowed = (bw if up else 0.0) + 8 * burst / window
            over.append(peak / allowed)
            level = _grade(peak / allowed, "rate_over")
            state = f"shaped to {bw / 1e6:.3g} Mbit/s" if up else "down"
            v.add(level, f"link {name} ({egress}) carried {peak / 1e6:.3g} Mbit/s at most "
                         f"while {state}{_when(ph)} (at most {allowed / 1e6:.3g} with its "
                         "token bucket): the shaping let more through")
            if up and bw > 0:
                judged.append((peak / bw, peak, bw, ph))
        drops = link.get("queue_drops")
        if not judged:
            continue
        ratio, peak, bw, ph = max(judged, key=lambda j: j[0])
        rows.append({"link": name, "egress": egress, "ratio": round(ratio, 4),
                     "saturated": bool(drops)})
        if drops:
            level = _grade(ratio, "rate_ratio", higher_is_worse=False)
            v.add(level, f"link {name} ({egress}) carried at most {peak / 1e6:.2f} of "
                         f"{bw / 1e6:.2f} Mbit/s ({ratio:.0%}){_when(ph)} while its queue "
                         f"overflowed ({drops} drops)")
    sat = [r["ratio"] for r in rows if r["saturated"]]
    v.checks["rate_ratio_min"] = min(sat) if sat else None
    v.checks["rate_over_max"] = round(max(over), 4) if over else None
    v.checks["links_saturated"] = len(sat)


def check_pings(v: _Verdict, raw: Mapping[str, Any], ping: pd.DataFrame | None) -> None:
    worst_min: float | None = None
    worst_first: float | None = None
    first_ms: float | None = None
    if ping is None or not len(ping) or "rtt_ms" not in ping:
        v.checks.update(rtt_excess_ms_max=None, first_rtt_ms=None, first_rtt_excess_ms=None)
        return
    for p in raw.get("pings") or []:
        cfg, name = _num(p.get("base_rtt_ms")), p.get("name")
        if cfg is None:
            continue
        rows = ping[(ping["src"] == p.get("src")) & (ping["dst"] == p.get("dst"))]
        if "path" in ping:
            rows = rows[rows["path"].isna()] if p.get("path") is None else \
                rows[rows["path"] == p.get("path")]
        if "t" in rows:
            rows = rows.sort_values("t", kind="stable")
        rtts = pd.to_numeric(rows["rtt_ms"], errors="coerce")
        if "lost" in rows:
            rtts = rtts[~rows["lost"].fillna(False).astype(bool)]
        rtts = rtts.dropna()
        if not len(rtts):
            continue
        tol = rtt_tolerance_ms(cfg)
        lo, first = float(rtts.min()), float(rtts.iloc[0])
        worst_min = max(worst_min or -math.inf, lo - cfg)
        if worst_first is None or first - cfg > worst_first:
            worst_first, first_ms = first - cfg, first
        lvl = _grade((lo - cfg) / tol, "rtt_excess_tol")
        v.add(lvl, f"ping {name}: lowest RTT {lo:.2f} ms against {cfg:.2f} ms configured "
                   f"(tolerance {tol:.2f} ms)")
        lvl = _grade((first - cfg) / tol, "first_rtt_excess_tol")
        v.add(lvl, f"ping {name}: first RTT {first:.2f} ms against {cfg:.2f} ms configured "
                   f"(tolerance {tol:.2f} ms)")
    v.checks["rtt_excess_ms_max"] = None if worst_min is None else round(worst_min, 3)
    v.checks["first_rtt_ms"] = None if first_ms is None else round(first_ms, 3)
    v.checks["first_rtt_excess_ms"] = None if worst_first is None else round(worst_first, 3)


def check_events(v: _Verdict, events: pd.DataFrame | None) -> None:
    if events is None or not len(events) or "t_applied" not in events:
        v.checks["event_late_ms_max"] = None
        return
    late = (pd.to_numeric(events["t_applied"]) - pd.to_numeric(events["t_planned"])) * 1000
    worst = float(late.max())
    v.checks["event_late_ms_max"] = round(worst, 3)
    v.add(_grade(worst, "event_late_ms"),
          f"a schedule event was applied {worst:.0f} ms after its planned time "
          f"({len(events)} events)")


def check_cpu(v: _Verdict, raw: Mapping[str, Any]) -> None:
    share = _num(raw.get("cpu_saturated_share"))
    v.checks["cpu_saturated_share"] = share
    v.checks["cpu_busy_mean"] = _num(raw.get("cpu_busy_mean"))
    v.checks["cpu_busiest_mean"] = _num(raw.get("cpu_busiest_mean"))
    busiest = _num(raw.get("cpu_busiest_mean"))
    if busiest is not None:
        v.add(_grade(busiest, "cpu_busiest_mean"),
              f"the busiest CPU was {busiest:.0%} busy on average over the traffic phase: "
              "packets waited for a CPU, so the links may have run slower and later than "
              "configured")
    if share is None:
        return
    v.add(_grade(share, "cpu_saturated_share"),
          f"a CPU was at least 95 % busy for {share:.0%} of the traffic phase (all CPUs "
          f"{(_num(raw.get('cpu_busy_mean')) or 0):.0%} busy on average): the emulation "
          "may not have kept up")


def check_reordering(v: _Verdict, flows: pd.DataFrame | None, policy: str) -> None:
    v.checks["emulator_ooo_ratio_max"] = None
    if policy in REORDERING_POLICIES:
        v.checks["emulator_ooo"] = f"not judged: {policy} reorders on purpose"
        return
    if flows is None or "ooo_ratio" not in flows or not len(flows):
        v.checks["emulator_ooo"] = "not measured: no flow captured at both ends"
        return
    tcp = flows[flows["protocol"].isin(["tcp", "mptcp-subflow"])] \
        if "protocol" in flows else flows
    ratio = pd.to_numeric(tcp["ooo_ratio"], errors="coerce")
    segs = pd.to_numeric(tcp["data_packets"], errors="coerce") if "data_packets" in tcp \
        else pd.Series(MIN_OOO_SEGMENTS, index=tcp.index)
    sizable = tcp[ratio.notna() & (segs >= MIN_OOO_SEGMENTS)]
    if not len(sizable):
        v.checks["emulator_ooo"] = "not measured: no flow captured at both ends " \
                                   f"with {MIN_OOO_SEGMENTS} or more segments"
        return
    worst_i = pd.to_numeric(sizable["ooo_ratio"]).idxmax()
    worst = float(sizable.loc[worst_i, "ooo_ratio"])
    v.checks["emulator_ooo_ratio_max"] = round(worst, 6)
    v.checks["emulator_ooo"] = f"{len(sizable)} flows"
    v.add(_grade(worst, "emulator_ooo_ratio"),
          f"flow {sizable.loc[worst_i, 'flow_id']}: {worst:.2%} of its segments arrived "
          f"after a segment sent later, under {policy or 'plain'} forwarding, which cannot "
          "reorder: the emulator did")


def _scheduled(events: pd.DataFrame | None) -> set[str]:
    """The links a schedule event changed."""
    if events is None or not len(events) or "link" not in events:
        return set()
    return {str(x) for x in events["link"].dropna()}


def _link_went_down(events: pd.DataFrame | None) -> bool:
    """Whether a schedule event took a link down (the kernel then drops what is on its
    way to the downed interface, and counts it with the softnet backlog drops)."""
    if events is None or not len(events) or "changes" not in events:
        return False
    for ch in events["changes"]:
        if isinstance(ch, str):
            try:
                ch = json.loads(ch)
            except ValueError:
                continue
        if isinstance(ch, Mapping) and ch.get("up") is False:
            return True
    return False


def check_drops(v: _Verdict, meta: Mapping[str, Any], raw: Mapping[str, Any],
                events: pd.DataFrame | None = None) -> None:
    soft = _num(raw.get("softnet_dropped"))
    lost = _num(raw.get("ovs_upcalls_lost"))
    cap = sum(int(st.get("dropped") or 0) for st in (meta.get("captures") or {}).values()
              if isinstance(st, Mapping))
    v.checks.update(softnet_dropped=soft, ovs_upcalls_lost=lost, capture_dropped=cap)
    if soft and _link_went_down(events):
        # enqueue_to_backlog drops (and counts) packets for an interface that is down
        v.checks["softnet_dropped_note"] = "not judged: the schedule took a link down"
    elif soft:
        v.add(WARN, f"the kernel dropped {soft:.0f} packets at full CPU backlogs (softnet), "
                    "where no queue was configured")
    if lost:
        v.add(WARN, f"Open vSwitch lost {lost:.0f} packets on their way to ovs-vswitchd")
    if cap:
        v.add(WARN, f"tcpdump missed {cap} packets (the captures are incomplete)")


def check_setup(v: _Verdict, meta: Mapping[str, Any], raw: Mapping[str, Any]) -> None:
    restarts = len((meta.get("controller") or {}).get("restarts") or [])
    v.checks["controller_restarts"] = restarts
    if restarts:
        v.add(WARN, f"the controller was restarted {restarts} time(s)")
    if "rps_mask" in raw and not raw.get("rps_mask") and (raw.get("cpus") or 1) > 1:
        v.add(WARN, "receive packet steering was off (TESTBED_RPS=0) on "
                    f"{raw.get('cpus')} CPUs: the emulator may reorder packets")
    errors = raw.get("errors") or []
    if errors:
        v.add(WARN, f"the fidelity monitor could not measure everything: {errors[0]}"
                    + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))
    ready = meta.get("readiness") or {}
    if ready.get("unreachable"):
        v.add(WARN, "before the run, no answer from " + ", ".join(ready["unreachable"][:3]))
    if ready and ready.get("quiet") is False:
        v.add(WARN, f"the CPUs were still busy ({(_num(ready.get('busy_last')) or 0):.0%}) "
                    f"when the run's clock started, after {ready.get('waited_s')} s")


def assess(meta: Mapping[str, Any], flows: pd.DataFrame | None = None,
           ping: pd.DataFrame | None = None, events: pd.DataFrame | None = None
           ) -> dict[str, Any]:
    """The run's fidelity section: {"verdict", "reasons", "checks"}.

    meta: metadata.json; flows, ping, events: the run's metrics tables.  A run recorded
    before fidelity sampling existed gets the verdict ``unknown``.
    """
    raw = meta.get("fidelity_raw")
    if not isinstance(raw, Mapping):
        return {"verdict": "unknown", "reasons": ["this run recorded no fidelity data "
                                                  "(made before the testbed sampled it)"],
                "checks": {}}
    v = _Verdict()
    policy = str((meta.get("controller") or {}).get("kind") or "")
    check_links(v, raw, _scheduled(events))
    check_pings(v, raw, ping)
    check_events(v, events)
    check_cpu(v, raw)
    check_reordering(v, flows, policy)
    check_drops(v, meta, raw, events)
    check_setup(v, meta, raw)
    return v.result()


CHECK_TEXT: dict[str, str] = {
    "rate_ratio": "peak 1-s rate / configured rate of a link direction whose queue "
                  "overflowed during the run (below the limit); for a link a schedule "
                  "changes, that of its best phase, against the rate then in force",
    "rate_over": "peak 1-s rate / (rate in force + token bucket per second) of a link "
                 "direction, in every phase of its schedule (0 while down): above the "
                 "limit, the link carried more than it was shaped to",
    "rtt_excess_tol": "(lowest ping RTT - configured RTT) / (5 % of configured + 2 ms)",
    "first_rtt_excess_tol": "(first ping RTT - configured RTT) / (5 % of configured + 2 ms)",
    "event_late_ms": "t_applied - t_planned of the latest schedule event, ms",
    "cpu_saturated_share": "share of the traffic phase (0.5 s samples) in which the "
                           "busiest CPU was at least 95 % busy",
    "cpu_busiest_mean": "mean busy share of the busiest CPU over the traffic phase",
    "emulator_ooo_ratio": "worst `ooo_ratio` of a TCP flow or subflow (100+ segments) "
                          "under any forwarding but spraying",
}


def thresholds_markdown() -> str:
    """The thresholds table of docs/fidelity.md (generated from `THRESHOLDS`)."""
    lines = ["| check | measured as | warn when | fail when |", "|---|---|---|---|"]
    for key, (warn, fail) in THRESHOLDS.items():
        op = "<" if key == "rate_ratio" else ">"
        lines.append(f"| `{key}` | {CHECK_TEXT[key]} | {op} {warn:g} | {op} {fail:g} |")
    return "\n".join(lines)
