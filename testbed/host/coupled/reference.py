"""Pure-Python models of the coupled controls, two ways.

* The published rules in real arithmetic (`lia_increase`, `olia_increase`,
  `balia_increase`, `balia_window_after_loss`, `wvegas_round`): windows in segments,
  RTTs in any one unit, the increase per acknowledged segment in segments.  Unit tests
  check them on hand-worked cases (``tests/unit/test_coupled_reference.py``).
* The same rules in the integer arithmetic of ``bpf/coupled.h`` (`decide`), applied to a
  decision record of the BPF program's log (`testbed.host.coupled.trace`): recomputing
  every logged decision from its logged inputs checks that the program computes what the
  model says (`check_trace`), and the integer results stay within rounding of the real
  ones.

A subflow is `Subflow(cwnd, rtt, aux, aux2)`: OLIA's ``aux``/``aux2`` are the amounts
acknowledged between the two last losses and since the last loss (l_r is their larger);
wVegas's ``aux`` is the subflow's base (smallest) RTT.  Free slots have ``cwnd == 0``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

FP_SHIFT = 20
FP = 1 << FP_SHIFT                 # increases are logged in 2^-20 segments
K_MAX = 256 << 10                  # RTT ratios above 256 count as 256
ALPHA_MAX = 65536 << 10            # BALIA's alpha above 65536 counts as 65536
TOTAL_ALPHA = 10                   # wVegas: segments queued per connection
GAMMA = 1                          # wVegas: queued segments that end slow start
U64 = (1 << 64) - 1


@dataclass(frozen=True)
class Subflow:
    """One subflow as a decision sees it: cwnd (segments), rtt, and aux/aux2 (above)."""

    cwnd: int | float
    rtt: int | float
    aux: int | float = 0
    aux2: int | float = 0


def _live(subs: Sequence[Subflow]) -> list[Subflow]:
    return [s for s in subs if s.cwnd > 0]


# -- the published rules, real arithmetic ------------------------------------------------

def lia_increase(subs: Sequence[Subflow], self: int) -> float:
    """RFC 6356: min(alpha / cwnd_total, 1 / cwnd_self) per acknowledged segment, where
    alpha / cwnd_total = max_i(w_i / rtt_i^2) / (sum_i w_i / rtt_i)^2."""
    live = _live(subs)
    coupled = max(s.cwnd / s.rtt ** 2 for s in live) / sum(s.cwnd / s.rtt for s in live) ** 2
    return min(coupled, 1 / subs[self].cwnd)


def olia_alpha(subs: Sequence[Subflow], self: int) -> float:
    """OLIA's alpha_r (Khalili et al., CoNEXT 2012, eq. 3)."""
    live = [i for i, s in enumerate(subs) if s.cwnd > 0]
    wmax = max(subs[i].cwnd for i in live)
    ell = {i: max(subs[i].aux, subs[i].aux2) for i in live}
    best = max(ell[i] ** 2 / subs[i].rtt for i in live)
    m = {i for i in live if subs[i].cwnd == wmax}
    b = {i for i in live if ell[i] ** 2 / subs[i].rtt == best}
    bm = b - m
    if not bm:
        return 0.0
    if self in bm:
        return 1 / (len(live) * len(bm))
    if self in m:
        return -1 / (len(live) * len(m))
    return 0.0


def olia_increase(subs: Sequence[Subflow], self: int) -> float:
    """OLIA: (w_r / rtt_r^2) / (sum_p w_p / rtt_p)^2 + alpha_r / w_r per acked segment."""
    live = _live(subs)
    s = subs[self]
    return (s.cwnd / s.rtt ** 2) / sum(p.cwnd / p.rtt for p in live) ** 2 \
        + olia_alpha(subs, self) / s.cwnd


def balia_alpha(subs: Sequence[Subflow], self: int) -> float:
    """BALIA's alpha_r = max_k x_k / x_r with x_k = w_k / rtt_k."""
    x = [s.cwnd / s.rtt for s in _live(subs)]
    return max(x) / (subs[self].cwnd / subs[self].rtt)


def balia_increase(subs: Sequence[Subflow], self: int) -> float:
    """BALIA (Peng et al., ToN 2016): x_r / (rtt_r (sum x)^2) (1 + a)/2 (4 + a)/5."""
    s = subs[self]
    a = balia_alpha(subs, self)
    total = sum(p.cwnd / p.rtt for p in _live(subs))
    return (s.cwnd / s.rtt) / (s.rtt * total ** 2) * (1 + a) / 2 * (4 + a) / 5


def balia_window_after_loss(subs: Sequence[Subflow], self: int) -> float:
    """BALIA's decrease: w_r - w_r / 2 * min(alpha_r, 1.5)."""
    w = subs[self].cwnd
    return w - w / 2 * min(balia_alpha(subs, self), 1.5)


def wvegas_round(subs: Sequence[Subflow], self: int, in_slow_start: bool) -> float | None:
    """wVegas (Cao et al., ICNP 2012) at the end of a round: the new window of subflow
    self, whose ``rtt`` is the round's smallest RTT and ``aux`` its base RTT.  None: slow
    start continues (the window then grows per ACK as NewReno's does)."""
    s = subs[self]
    diff = s.cwnd * (s.rtt - s.aux) / s.rtt
    weight = (s.cwnd / s.rtt) / sum(p.cwnd / p.rtt for p in _live(subs))
    alpha = TOTAL_ALPHA * weight
    if in_slow_start:
        if diff > GAMMA:
            return max(min(s.cwnd, s.cwnd * s.aux / s.rtt + 1), 2)
        return None
    if diff > alpha:
        return max(s.cwnd - 1, 2)
    if diff < alpha:
        return s.cwnd + 1
    return s.cwnd


# -- the integer arithmetic of bpf/coupled.h ---------------------------------------------

@dataclass
class _Agg:
    n: int = 0
    wmax: int = 0
    rmax: int = 1
    sum: int = 0
    best: int = 0
    mine: int = 0
    xmax: int = 0
    xself: int = 0
    lmax: int = 0
    n_m: int = 0
    n_bm: int = 0
    self_m: bool = False
    self_bm: bool = False


def _weight(rmax: int, rtt: int) -> int:
    return 0 if not rtt else min((rmax << 10) // rtt, K_MAX)


def _gather(subs: Sequence[Subflow], self: int, sets: bool) -> _Agg:
    a = _Agg()
    for s in subs:
        if s.cwnd and s.rtt > a.rmax:
            a.rmax = int(s.rtt)
        a.wmax = max(a.wmax, int(s.cwnd))
    for i, s in enumerate(subs):
        if not s.cwnd:
            continue
        k = _weight(a.rmax, int(s.rtt))
        ck, ell = int(s.cwnd) * k, int(max(s.aux, s.aux2))
        a.n += 1
        a.sum += ck
        a.best = max(a.best, ck * k)
        a.xmax = max(a.xmax, ck)
        a.lmax = max(a.lmax, ell * ell * k)
        if i == self:
            a.mine, a.xself = ck * k, ck
    if sets:
        for i, s in enumerate(subs):
            if not s.cwnd:
                continue
            k = _weight(a.rmax, int(s.rtt))
            ell = int(max(s.aux, s.aux2))
            in_m, in_b = s.cwnd == a.wmax, ell * ell * k == a.lmax
            a.n_m += in_m
            a.n_bm += in_b and not in_m
            if i == self:
                a.self_m, a.self_bm = in_m, in_b and not in_m
    return a


def _normalise(v: int) -> tuple[int, int]:
    s = 0
    while s < 62 and not v >> 62:
        v, s = v << 1, s + 1
    return v, s


def _ratio_sq(num: int, den: int, out: int = FP_SHIFT) -> int:
    """num / den^2 in 2^-out units, as ``ratio_sq`` in coupled.h computes it."""
    if not den or not num:
        return 0
    num, a = _normalise(num)
    q = num // den
    if not q:
        return 0
    q, b = _normalise(q)
    q //= den
    if a + b < out:
        return 1 << (out + 4)
    sh = a + b - out
    return 0 if sh >= 64 else min(q >> sh, 1 << (out + 4))


def decide(cc: str, kind: str, subs: Sequence[Subflow], self: int,
           in_ss: bool = False) -> int | None:
    """What the BPF program decides, in its integer arithmetic (None: not determined by
    the record, e.g. wVegas continuing slow start).

    cc: lia | olia | balia | wvegas; kind: increase | ssthresh | round (as logged);
    subs: the connection's slots (RTTs in microseconds); self: the deciding slot.
    """
    cwnd = max(int(subs[self].cwnd), 1)
    if cc == "wvegas" and kind == "round":
        s = subs[self]
        w, rtt, base = int(s.cwnd), int(s.rtt), int(s.aux)
        a = _gather(subs, self, False)
        alpha = (TOTAL_ALPHA * a.xself << 10) // a.sum if a.sum else TOTAL_ALPHA << 10
        diff = (w * (rtt - min(base, rtt)) << 10) // rtt
        if in_ss:
            return max(min(w, (w * base) // rtt + 1), 2) if diff > GAMMA << 10 else None
        if diff > alpha:
            return w - 1 if w > 2 else 2
        return w + 1 if diff < alpha else w
    if cc == "balia":
        a = _gather(subs, self, False)
        al = 1024 if not a.xself else min((a.xmax << 10) // a.xself, ALPHA_MAX)
        if kind == "ssthresh":
            cut = (cwnd * min(al, 1536)) >> 11
            return cwnd - cut if cwnd > cut + 2 else 2
        xr, xm, total = a.xself, a.xmax, a.sum
        for _ in range(40):
            if not total >> 30:
                break
            xr, xm, total = xr >> 1, xm >> 1, total >> 1
        return _ratio_sq((xr + xm) * (4 * xr + xm), total) // (10 * cwnd)
    if cc == "lia" and kind == "increase":
        a = _gather(subs, self, False)
        return min(_ratio_sq(a.best, a.sum), FP // cwnd)
    if cc == "olia" and kind == "increase":
        a = _gather(subs, self, True)
        step = 0
        if a.n_bm and a.n:
            if a.self_bm:
                step = FP // (a.n * a.n_bm) // cwnd
            elif a.self_m and a.n_m:
                step = -(FP // (a.n * a.n_m) // cwnd)
        return _ratio_sq(a.mine, a.sum) + step
    raise ValueError(f"no model for {cc} {kind}")


def record_subflows(rec: dict[str, Any]) -> list[Subflow]:
    """The slots of a logged decision as `Subflow` values."""
    return [Subflow(c, r, x, y) for c, r, x, y in
            zip(rec["cwnd"], rec["rtt_us"], rec["aux"], rec["aux2"], strict=True)]


@dataclass(frozen=True)
class TraceCheck:
    """How many logged decisions the model reproduced exactly."""

    compared: int
    equal: int
    undetermined: int
    mismatches: list[dict[str, Any]]

    @property
    def share_equal(self) -> float:
        return self.equal / self.compared if self.compared else 0.0


def check_trace(records: Iterable[dict[str, Any]]) -> TraceCheck:
    """Recompute every logged decision with `decide` and count the equal ones."""
    compared = equal = undetermined = 0
    bad: list[dict[str, Any]] = []
    for rec in records:
        want = decide(rec["cc"], rec["kind"], record_subflows(rec), int(rec["self"]),
                      bool(rec["in_ss"]))
        if want is None:
            undetermined += 1
            continue
        compared += 1
        if want == int(rec["out"]):
            equal += 1
        elif len(bad) < 20:
            bad.append({**rec, "model": want})
    return TraceCheck(compared, equal, undetermined, bad)
