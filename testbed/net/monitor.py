"""What the emulation itself did during a run: CPU, kernel backlog drops, link counters.

A result is only as good as the emulation under it, so every run samples, from the
root namespace and without starting a program (file reads only):

* ``/proc/stat``: how busy the machine's CPUs were, together and the busiest one (a
  saturated CPU delays every qdisc, timer and packet it handles, so links run slower
  and later than configured; with receive packet steering one flow's packets are all
  handled on one CPU, so one saturated CPU is enough);
* ``/proc/net/softnet_stat``: packets the kernel dropped because a CPU's backlog queue
  was full, and how often its receive processing ran out of budget (``time_squeeze``):
  drops where no queue was configured;
* the byte counters of every shaped link direction whose interface (or whose veth peer)
  lives in the root namespace: the rate each link actually carried, over the whole run
  and, for a link a schedule changes, in each stretch between its changes (`link_phases`:
  the rate then in force, 0 while it is down), so a 384 kbit/s stretch is judged against
  384 kbit/s and not against the 10 Mbit/s the link starts with.

`Monitor` runs these on a thread every `interval` seconds from the run's clock start to
the end of its traffic; `Monitor.summary` is what ``metadata.json`` keeps under
``fidelity_raw`` and `analysis.fidelity` judges.  Everything here is pure except the
file reads in `Monitor`.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.spec.linkshape import BURST_MIN_BYTES, burst_for

if TYPE_CHECKING:
    from testbed.spec.linkshape import LinkShape
    from testbed.spec.model import ScheduleEvent

BUSY_SATURATED = 0.95  # an interval whose busiest CPU was this busy counts as saturated
RATE_WINDOW_S = 1.0    # achieved link rate: the best window of this length
# a phase's rate is read from windows this far from its changes: an event lands a few ms
# late, and what a slower rate or a downed link held back drains at its start
PHASE_GUARD_S = 0.25


def parse_proc_stat(text: str) -> tuple[int, int]:
    """(busy, total) jiffies of the aggregate ``cpu`` line of ``/proc/stat``.

    Busy is everything but idle and iowait (user, nice, system, irq, softirq, steal).
    """
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            vals = [int(v) for v in parts[1:9]]
            vals += [0] * (8 - len(vals))
            total = sum(vals)
            idle = vals[3] + vals[4]
            return total - idle, total
    raise ValueError("no aggregate cpu line in /proc/stat")


def parse_proc_stat_cpus(text: str) -> list[tuple[int, int]]:
    """(busy, total) jiffies of each ``cpuN`` line of ``/proc/stat``, in order."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0].startswith("cpu") and parts[0][3:].isdigit():
            vals = [int(v) for v in parts[1:9]]
            vals += [0] * (8 - len(vals))
            out.append((sum(vals) - vals[3] - vals[4], sum(vals)))
    return out


def busiest_fractions(samples: Sequence[Sequence[tuple[int, int]]]) -> list[float]:
    """Per interval between consecutive per-CPU samples, the busy share of the busiest
    CPU (with receive steering a flow's packets are handled on one CPU, so one busy CPU
    limits it while the machine as a whole looks half idle)."""
    out = []
    for a, b in itertools.pairwise(samples):
        shares = [s for (b0, n0), (b1, n1) in zip(a, b, strict=False)
                  if (s := _share(b0, n0, b1, n1)) is not None]
        if shares:
            out.append(max(shares))
    return out


def _share(b0: int, n0: int, b1: int, n1: int) -> float | None:
    """Busy share between two (busy, total) readings of one CPU or all; None when the
    interval cannot be read: no time passed, or a counter went backwards (the kernel's
    idle and iowait counts of an idle NOHZ CPU can step back, which would make the share
    exceed 1 or fall below 0)."""
    if n1 <= n0 or b1 < b0 or n1 - b1 < n0 - b0:
        return None
    return (b1 - b0) / (n1 - n0)


def parse_softnet(text: str) -> dict[str, int]:
    """Totals over CPUs of ``/proc/net/softnet_stat``: processed, dropped, time_squeeze
    (hex columns 1-3 of each CPU's line)."""
    out = {"processed": 0, "dropped": 0, "time_squeeze": 0}
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 3:
            out["processed"] += int(cols[0], 16)
            out["dropped"] += int(cols[1], 16)
            out["time_squeeze"] += int(cols[2], 16)
    return out


def parse_dpctl_lost(text: str) -> int | None:
    """Packets the OVS kernel datapath lost on the way to ovs-vswitchd (``ovs-dpctl
    show``: ``lookups: hit:N missed:N lost:N``), summed over datapaths; None if absent."""
    total, seen = 0, False
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("lookups:"):
            for part in line.split()[1:]:
                k, _, v = part.partition(":")
                if k == "lost" and v.isdigit():
                    total += int(v)
                    seen = True
    return total if seen else None


def busy_fractions(samples: Sequence[tuple[float, int, int]]) -> list[float]:
    """Busy share of each interval between consecutive (t, busy, total) samples."""
    return [s for (_t0, b0, n0), (_t1, b1, n1) in itertools.pairwise(samples)
            if (s := _share(b0, n0, b1, n1)) is not None]


def peak_rate_bps(samples: Sequence[tuple[float, int]], window_s: float = RATE_WINDOW_S
                  ) -> float | None:
    """The highest rate (bit/s) over any window of at least window_s between two
    (time, byte counter) samples; None with fewer than two samples that far apart."""
    best: float | None = None
    j = 0
    for i in range(len(samples)):
        t1, c1 = samples[i]
        while j < i and t1 - samples[j + 1][0] >= window_s:
            j += 1
        t0, c0 = samples[j]
        if t1 - t0 >= window_s:
            rate = (c1 - c0) * 8 / (t1 - t0)
            best = rate if best is None or rate > best else best
    return best


@dataclass(frozen=True)
class Phase:
    """A stretch of one link's schedule: from start to end (epoch s), the rate in force
    (bit/s; 0 while the link is down; None: no rate limit) and the token bucket then
    (bytes: what the shaper may send at once above the rate)."""

    start: float
    end: float
    bw_bps: int | None
    burst_bytes: int
    up: bool


def link_phases(shape: LinkShape, events: Sequence[ScheduleEvent], t0: float, t_end: float
                ) -> list[Phase]:
    """The stretches of one link between the changes its events (planned at t0 + at, in
    time order) make, from t0 to t_end; one phase when none changes it."""
    phases: list[Phase] = []
    start, up = t0, True

    def close(end: float) -> None:
        if end > start:
            phases.append(Phase(start, end, (shape.bw_bps if up else 0), burst_for(shape), up))

    for ev in events:
        new = ev.apply_to(shape)
        new_up = up if ev.link_up is None else ev.link_up
        if new == shape and new_up == up:
            continue
        at = min(max(t0 + ev.at, t0), t_end)
        close(at)
        start, shape, up = at, new, new_up
    close(t_end)
    return phases


def phase_peak_bps(samples: Sequence[tuple[float, int]], phase: Phase,
                   guard_s: float = PHASE_GUARD_S) -> float | None:
    """`peak_rate_bps` over the samples inside the phase, guard_s away from its ends."""
    inside = [s for s in samples if phase.start + guard_s <= s[0] <= phase.end - guard_s]
    return peak_rate_bps(inside)


@dataclass(frozen=True)
class LinkCounter:
    """Where to read what one shaped link direction carried: the root-namespace
    interface and its counter (``tx_bytes`` of the egress itself, or ``rx_bytes`` of
    the veth peer when the egress lives in a host's namespace); shape: the link's shape
    when the run starts (its schedule's phases start from it)."""

    link: str
    egress: str      # the shaped interface
    read_dev: str    # the root-namespace interface whose counter is read
    counter: str     # tx_bytes | rx_bytes
    bw_bps: int | None
    shape: LinkShape | None = None

    @property
    def burst_bytes(self) -> int:
        """The token bucket of the starting shape (one frame when it is unknown)."""
        return burst_for(self.shape) if self.shape is not None else BURST_MIN_BYTES

    @property
    def path(self) -> Path:
        return Path("/sys/class/net") / self.read_dev / "statistics" / self.counter


class Monitor:
    """Samples CPU, softnet and link counters on a thread (see the module docstring).

    links: the link directions to watch; interval: seconds between samples; read: reads
    a file's text (tests pass a fake).
    """

    def __init__(self, links: Sequence[LinkCounter], interval: float = 0.5,
                 read: Callable[[str], str] | None = None):
        self.links = list(links)
        self.interval = interval
        self._read = read or (lambda p: Path(p).read_text())
        self.cpu: list[tuple[float, int, int]] = []
        self.cpus: list[list[tuple[int, int]]] = []
        self.softnet: list[dict[str, int]] = []
        self.counters: dict[str, list[tuple[float, int]]] = {c.egress: [] for c in self.links}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.t_start: float | None = None
        self.t_end: float | None = None

    def sample(self) -> None:
        """Take one sample of everything (errors are kept, not raised)."""
        now = time.time()
        try:
            text = self._read("/proc/stat")
            busy, total = parse_proc_stat(text)
            self.cpu.append((now, busy, total))
            self.cpus.append(parse_proc_stat_cpus(text))
        except (OSError, ValueError) as exc:
            self._error(f"/proc/stat: {exc}")
        try:
            self.softnet.append(parse_softnet(self._read("/proc/net/softnet_stat")))
        except (OSError, ValueError) as exc:
            self._error(f"softnet_stat: {exc}")
        for c in self.links:
            try:
                self.counters[c.egress].append((now, int(self._read(str(c.path)))))
            except (OSError, ValueError) as exc:
                self._error(f"{c.path}: {exc}")

    def _error(self, text: str) -> None:
        if len(self.errors) < 10:
            self.errors.append(text)

    def start(self) -> Monitor:
        self.t_start = time.time()
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="monitor", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def stop(self, events: Sequence[ScheduleEvent] = (), t0: float | None = None
             ) -> dict[str, Any]:
        """Stop sampling (one last sample) and return `summary` (events, t0: the run's
        link schedule and clock start, for the phases of the links it changes)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
            self.sample()
        self.t_end = time.time()
        return self.summary(events, t0)

    def _phases(self, c: LinkCounter, events: Sequence[ScheduleEvent], t0: float | None
                ) -> list[dict[str, Any]] | None:
        """Each phase of c's link with the peak rate it carried (None: no event of the
        schedule changes the link, or its start shape is unknown)."""
        mine = [ev for ev in events if ev.link == c.link]
        if not mine or t0 is None or c.shape is None or self.t_end is None:
            return None
        phases = link_phases(c.shape, mine, t0, self.t_end)
        if len(phases) < 2:
            return None
        out = []
        for ph in phases:
            peak = phase_peak_bps(self.counters[c.egress], ph)
            out.append({"from_s": round(ph.start - t0, 3), "to_s": round(ph.end - t0, 3),
                        "bw_bps": ph.bw_bps, "up": ph.up, "burst_bytes": ph.burst_bytes,
                        "peak_bps": None if peak is None else round(peak, 1)})
        return out

    def summary(self, events: Sequence[ScheduleEvent] = (), t0: float | None = None
                ) -> dict[str, Any]:
        """JSON-safe summary: CPU busy mean / saturated share, softnet deltas, per link
        direction configured and peak rate, and for a link the schedule changes each
        phase's rate in force and peak rate (`link_phases`)."""
        busy = busy_fractions(self.cpu)
        busiest = busiest_fractions(self.cpus)
        sat = [b for b in busiest if b >= BUSY_SATURATED]
        first, last = (self.softnet[0], self.softnet[-1]) if self.softnet else ({}, {})
        links = []
        for c in self.links:
            peak = peak_rate_bps(self.counters[c.egress])
            entry = {"link": c.link, "egress": c.egress, "bw_bps": c.bw_bps,
                     "burst_bytes": c.burst_bytes,
                     "peak_bps": None if peak is None else round(peak, 1),
                     "bytes": (self.counters[c.egress][-1][1] - self.counters[c.egress][0][1])
                     if len(self.counters[c.egress]) >= 2 else None}
            phases = self._phases(c, events, t0)
            if phases is not None:
                entry["phases"] = phases
            links.append(entry)
        return {
            "interval_s": self.interval, "samples": len(self.cpu),
            "rate_window_s": RATE_WINDOW_S, "phase_guard_s": PHASE_GUARD_S,
            "duration_s": None if self.t_start is None or self.t_end is None
            else round(self.t_end - self.t_start, 3),
            "cpu_busy_mean": round(sum(busy) / len(busy), 4) if busy else None,
            "cpu_busiest_mean": round(sum(busiest) / len(busiest), 4) if busiest else None,
            "cpu_saturated_share": round(len(sat) / len(busiest), 4) if busiest else None,
            "softnet_dropped": (last.get("dropped", 0) - first.get("dropped", 0))
            if self.softnet else None,
            "softnet_time_squeeze": (last.get("time_squeeze", 0)
                                     - first.get("time_squeeze", 0)) if self.softnet else None,
            "links": links, "errors": self.errors,
        }


def link_counters(links: Mapping[str, Any], peer_of: Mapping[str, str],
                  in_namespace: Mapping[str, bool]) -> list[LinkCounter]:
    """The link directions a `Monitor` can read from the root namespace.

    links: `testbed.net.network.Network.links` (name -> NamedLink with ``shape`` and
    ``egress``); peer_of: interface -> the other end of its veth; in_namespace:
    interface -> whether it lives in a host's namespace.  A direction whose egress and
    peer are both inside namespaces is left out (its counters are not visible here).
    """
    out = []
    for name, link in links.items():
        shape = link.shape
        bw = getattr(shape, "bw_bps", None)
        for eg in link.egress:
            if not in_namespace.get(eg.intf, eg.in_namespace):
                out.append(LinkCounter(name, eg.intf, eg.intf, "tx_bytes", bw, shape))
            elif eg.intf in peer_of and not in_namespace.get(peer_of[eg.intf], True):
                out.append(LinkCounter(name, eg.intf, peer_of[eg.intf], "rx_bytes", bw, shape))
    return out


def parse_qdisc_drops(text: str) -> dict[str, int]:
    """``tc -s -j qdisc show`` -> {device: packets its queues dropped because they were
    full}.  netem's drops are left out: that is where configured random loss happens (the
    testbed's queue is the tbf/pfifo under it, `testbed.net.shaping`)."""
    import json

    out: dict[str, int] = {}
    try:
        data = json.loads(text or "[]")
    except ValueError:
        return out
    for q in data if isinstance(data, list) else []:
        dev = q.get("dev")
        if isinstance(dev, str):
            overflow = 0 if q.get("kind") == "netem" else int(q.get("drops") or 0)
            out[dev] = out.get(dev, 0) + overflow
    return out


def with_queue_drops(links: list[dict[str, Any]], before: Mapping[str, int] | None,
                     after: Mapping[str, int] | None) -> list[dict[str, Any]]:
    """links (`Monitor.summary`'s) with ``queue_drops``: what the egress's qdiscs dropped
    between the two snapshots (None where the egress is not in the root namespace)."""
    out = []
    for link in links:
        dev = link.get("egress")
        drops = None
        if before is not None and after is not None and dev in after:
            drops = after[dev] - before.get(dev, 0)
        out.append({**link, "queue_drops": drops})
    return out
