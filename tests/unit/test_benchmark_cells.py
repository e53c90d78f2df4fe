"""Benchmarks never print or store a zero in place of a measurement (issue 25): a cell that
could not be measured carries its reason, counts as unmeasured (the benchmark then exits
non-zero), and is null with the reason beside it in --json output."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _bench(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}",
                                                  ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_unmeasured_cells_are_null_with_their_reason_in_json() -> None:
    fid = _bench("fidelity")
    row = {"rate_mbit": 10, "delay_ms": 10, "tcp_mbit": "n/a: iperf3: unable to connect",
           "rtt_ms": 20.4, "ooo_pct": 0.0}
    assert fid.unmeasured([row]) == ["tcp_mbit: n/a: iperf3: unable to connect"]
    out = json.loads(json.dumps(fid.as_json(row)))
    assert out["tcp_mbit"] is None and out["rtt_ms"] == 20.4 and out["ooo_pct"] == 0.0
    assert out["unmeasured"] == {"tcp_mbit": "iperf3: unable to connect"}
    assert fid.as_json({"rtt_ms": 1.0})["unmeasured"] == {}


def test_failed_schedule_events_count_as_unmeasured() -> None:
    fid = _bench("fidelity")
    lat = {"events": 40, "planned": 40, "errors": 2, "mean_ms": 3.1, "p95_ms": 9.0,
           "max_ms": 12.0, "error": "n/a: 2 of 40 events failed: tc: RTNETLINK answers"}
    assert fid.unmeasured([lat]) == [f"error: {lat['error']}"]
    none = {"events": 0, "planned": 40, "errors": 0, "mean_ms": "n/a: no event applied",
            "p95_ms": "n/a: no event applied", "max_ms": "n/a: no event applied"}
    assert len(fid.unmeasured([none])) == 3
    fid.print_tables(None, [], [], none)  # prints n/a, never a number it does not have
