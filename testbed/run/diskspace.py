"""Disk space for a run's captures: checked before the network is built, watched while
the traffic runs.

A capture grows with the traffic, and a full disk must not leave a half-written bundle
that claims to be a result.  So:

* `capture_estimate(plan)`: the most bytes the run's captures can take -- every capture
  seeing the fastest link of the run (its configured or scheduled rate) at full rate in
  1500-byte packets, plus one ACK for every two of them, each stored as
  ``min(snaplen, 1514) + 16`` bytes (the pcap record header), over the run's duration.
  Pure.
* `check_free(folder, need)`: `DiskSpaceError` (exit 2, before anything is built) when
  the file system holding folder has less than need + `RESERVE_BYTES` free.
* `DiskWatch(folder)`: ``low()`` says why the run must stop when less than `LOW_BYTES`
  are left; the traffic loop (`testbed.run.execute`) ends the traffic phase then, the
  captures are closed and kept, and the run is ``failed`` naming the disk
  (`testbed.run.outcome`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.core.errors import InputError
from testbed.plan.links import planned_links
from testbed.spec.linkshape import shape_from_mininet_params

if TYPE_CHECKING:
    from testbed.plan.netplan import NetworkPlan

MIB = 1024 * 1024
RESERVE_BYTES = 256 * MIB  # kept free beyond the estimate before a run starts
LOW_BYTES = 64 * MIB       # below this while the traffic runs, the run stops
PCAP_RECORD_HEADER = 16
FULL_FRAME = 1514
ACKS_PER_SEGMENT = 0.5


class DiskSpaceError(InputError):
    """Too little free space for a run's captures."""


def free_bytes(folder: Path) -> int:
    """Bytes an unprivileged writer may still use on the file system holding folder (the
    nearest existing parent when folder does not exist yet)."""
    here = Path(os.path.abspath(folder))
    while not here.exists() and here != here.parent:
        here = here.parent
    st = os.statvfs(here)
    return st.f_bavail * st.f_frsize


def _fastest_bps(plan: NetworkPlan) -> float:
    rates = [shape.bw_bps for *_ends, info in planned_links(plan.topo)
             if (shape := shape_from_mininet_params(info)) is not None and shape.bw_bps]
    rates += [float(ev.bw) for ev in plan.events if ev.bw]
    # an unshaped topology: veth pairs run as fast as the CPU; take 10 Gbit/s
    return max(rates, default=10e9)


def capture_estimate(plan: NetworkPlan) -> int:
    """The most bytes plan's captures can take (see the module docstring); 0 without
    captures."""
    if not plan.captures:
        return 0
    per_packet = min(plan.spec.capture.snaplen, FULL_FRAME) + PCAP_RECORD_HEADER
    packets_per_s = _fastest_bps(plan) / 8 / 1500 * (1 + ACKS_PER_SEGMENT)
    return int(len(plan.captures) * packets_per_s * per_packet * float(plan.spec.duration))


def check_free(folder: Path, need: int, free: Callable[[Path], int] = free_bytes) -> int:
    """Raise `DiskSpaceError` unless folder's file system has need + `RESERVE_BYTES`
    free; return the free bytes.  free: how free space is read (tests)."""
    have = free(folder)
    if have < need + RESERVE_BYTES:
        raise DiskSpaceError(
            f"{folder}: {have / MIB:.0f} MiB free, but this run's captures may take up to "
            f"{need / MIB:.0f} MiB (and {RESERVE_BYTES / MIB:.0f} MiB are kept free); free "
            "some space, give --out on another disk, or lower capture.snaplen / duration")
    return have


class DiskWatch:
    """Whether the disk under a run's bundle is nearly full (read at most every
    `every_s` seconds; a read is one statvfs)."""

    def __init__(self, folder: Path, free: Callable[[Path], int] = free_bytes,
                 every_s: float = 1.0):
        self.folder, self._free, self.every_s = folder, free, every_s
        self._next = 0.0
        self.stopped: str | None = None  # why the run was stopped, once it was

    def low(self, now: float) -> str | None:
        """Why the run must stop now (less than `LOW_BYTES` free), else None; the reason
        stays in ``stopped``."""
        if self.stopped is not None or now < self._next:
            return self.stopped
        self._next = now + self.every_s
        have = self._free(self.folder)
        if have >= LOW_BYTES:
            return None
        self.stopped = (f"the disk holding {self.folder} is nearly full ({have / MIB:.0f} MiB "
                f"left, under {LOW_BYTES / MIB:.0f} MiB): the traffic was stopped early and "
                "the captures so far were kept")
        return self.stopped
