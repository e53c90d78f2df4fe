"""Trace CSV files read into the spec's schedule events (units, bare numbers, errors)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from testbed.core.errors import InputError
from testbed.spec.model import ScheduleEvent
from testbed.spec.trace import load_trace, parse_trace


def test_trace_with_units_and_empty_cells() -> None:
    text = "time,bw,delay,loss\n0s,10Mbit,10ms,0%\n1.5s,2Mbit,,\n3s,,70ms,1%\n"
    evs = parse_trace(io.StringIO(text), "wifi")
    assert [e.at for e in evs] == [0.0, 1.5, 3.0]
    assert evs[1] == ScheduleEvent(at=1.5, link="wifi", bw=2_000_000)
    assert evs[2] == ScheduleEvent(at=3.0, link="wifi", delay=0.07, loss=1.0)


def test_trace_with_bare_numbers(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("time_s,bw_kbit,delay_ms,loss_pct\n0,384,70,0.5\n2.5,20000,1,0\n")
    evs = load_trace(p, "cell")
    assert evs[0] == ScheduleEvent(at=0.0, link="cell", bw=384_000, delay=0.07, loss=0.5)
    assert evs[1].at == 2.5 and evs[1].bw == 20_000_000


def test_a_byte_order_mark_is_not_part_of_the_first_column(tmp_path: Path) -> None:
    """A spreadsheet saves CSV with a byte-order mark: it read as column '\ufefftime'."""
    from testbed.spec.trace import TraceFolder

    p = tmp_path / "t.csv"
    p.write_bytes("time_s,bw_kbit\n0,384\n".encode("utf-8-sig"))
    assert load_trace(p, "cell")[0].bw == 384_000
    assert TraceFolder(tmp_path).rows("t.csv", "cell")[0][1].bw == 384_000


@pytest.mark.parametrize("text, words", [
    ("", "empty trace"),
    ("when,bw\n", "unknown column"),
    ("bw\n10Mbit\n", "needs a 'time'"),
    ("time,bw\n2s,1Mbit\n1s,2Mbit\n", "goes backwards"),
    ("time,bw\n1s,fast\n", "row 2: column 'bw': 'fast' is not a rate"),
    ("time,bw\n1s\n", "1 cells"),
    ("time,bw\n1s,20Gbit\n", "row 2: column 'bw' has '20Gbit': 20000000000 is out of range"),
    ("time_s,loss_pct\n1,150\n", "row 2: column 'loss_pct' has '150': 150.0 is too large"),
    # no finite number (these crashed the check with OverflowError)
    ("time_s,bw_mbit\n0,inf\n", "row 2: column 'bw_mbit' has 'inf': not a finite number"),
    ("time_s,bw_kbit\n0,1e400\n", "column 'bw_kbit' has '1e400': not a finite number"),
    ("time_s,bw_mbit\n0,nan\n", "column 'bw_mbit' has 'nan': not a finite number"),
    ("time_s,delay_ms\n0,-inf\n", "column 'delay_ms' has '-inf': not a finite number"),
    ("time_s,bw_mbit\ninf,1\n", "column 'time_s' has 'inf': not a finite number"),
    # a rate must be above zero, a delay may be zero (a rate of -5 said ">= 0")
    ("time_s,bw_mbit\n0,-5\n", "-5000000 is negative; a rate must be greater than zero"),
    ("time_s,delay_ms\n0,-5\n", "-0.005 is negative; a duration must be >= 0"),
])
def test_bad_traces(text: str, words: str) -> None:
    with pytest.raises(InputError, match=None) as err:
        parse_trace(io.StringIO(text), "x", source="t.csv")
    assert words in str(err.value) and "t.csv" in str(err.value)


def test_missing_trace_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        load_trace(tmp_path / "nope.csv", "x")
