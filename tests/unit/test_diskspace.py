"""Disk space for captures (issue 19): checked before a run builds anything, watched while
its traffic runs; a full disk stops the traffic, keeps the captures and fails the run by
name; too little space stops the sweep with one line (exit 2)."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path

import pytest
from test_results import SPEC, FakeRunner, plans, statuses

from testbed.plan.netplan import plan_network
from testbed.results.bundle import COMPLETE
from testbed.run import execute
from testbed.run.diskspace import (
    LOW_BYTES,
    MIB,
    RESERVE_BYTES,
    DiskSpaceError,
    DiskWatch,
    capture_estimate,
    check_free,
    free_bytes,
)
from testbed.run.outcome import run_problems
from testbed.run.sweep import run_sweep
from testbed.spec.sweep import expand


def _plan(**changes):
    spec = copy.deepcopy(SPEC)
    spec.pop("sweep")
    spec.update(changes)
    return plan_network(expand(spec, "fake.toml")[0])


def test_estimate_is_every_capture_at_the_fastest_rate():
    plan = _plan()
    assert len(plan.captures) >= 2
    # 10 Mbit/s in 1500-byte packets plus an ACK per two, 128 + 16 bytes each, for 5 s
    per_capture = 10e6 / 8 / 1500 * 1.5 * (128 + 16) * 5
    assert capture_estimate(plan) == int(len(plan.captures) * per_capture)
    faster = _plan(schedule=[{"at": "1s", "link": "a", "bw": "40Mbit"}])
    assert capture_estimate(faster) == 4 * capture_estimate(plan)
    full = _plan(capture={"snaplen": 9000})
    assert capture_estimate(full) == int(capture_estimate(plan) * (1514 + 16) / (128 + 16))
    assert capture_estimate(_plan(capture={"enabled": False})) == 0


def test_too_little_space_is_one_line_naming_folder_and_sizes(tmp_path):
    need = 100 * MIB
    assert check_free(tmp_path, need, free=lambda _p: need + RESERVE_BYTES) > 0
    with pytest.raises(DiskSpaceError) as exc:
        check_free(tmp_path, need, free=lambda _p: need + RESERVE_BYTES - 1)
    msg = str(exc.value)
    assert "\n" not in msg and str(tmp_path) in msg and "100 MiB" in msg
    assert exc.value.exit_code == 2
    assert free_bytes(tmp_path / "not" / "made" / "yet") == free_bytes(tmp_path) > 0


def test_the_watch_reads_at_most_once_a_second_and_keeps_its_reason(tmp_path):
    reads = iter([LOW_BYTES + 1, LOW_BYTES - 1])
    calls = []

    def free(p: Path) -> int:
        calls.append(p)
        return next(reads)

    w = DiskWatch(tmp_path, free=free, every_s=1.0)
    assert w.low(10.0) is None and w.low(10.5) is None and len(calls) == 1
    why = w.low(11.0)
    assert why is not None and str(tmp_path) in why and "captures so far were kept" in why
    assert w.stopped == why == w.low(11.1) and len(calls) == 2


def test_a_full_disk_ends_the_traffic_early_and_fails_the_run(tmp_path):
    class Net:
        checks = 0

        def check(self):
            self.checks += 1

    frees = itertools.chain([LOW_BYTES * 4] * 3, itertools.repeat(LOW_BYTES // 2))
    w = DiskWatch(tmp_path, free=lambda _p: next(frees), every_s=0.0)
    exp = _plan().spec.model_copy(update={"duration": 30.0})
    import time

    t0 = time.time()
    assert execute._traffic(exp, Net(), t0, None, [], disk=w) is True
    assert time.time() - t0 < 5 and w.stopped
    problems = run_problems({"disk_full": w.stopped, "flows": {"count": 1, "failed": 1}},
                            [], [])
    assert problems[0] == w.stopped and len(problems) == 2


def test_a_disk_space_error_stops_the_sweep(tmp_path):
    fake = FakeRunner(fail={1}, error=DiskSpaceError)
    with pytest.raises(DiskSpaceError):
        run_sweep(plans(), tmp_path, fake)
    assert len(fake.calls) == 2
    assert statuses(tmp_path)[plans()[0].run_id] == COMPLETE
