"""ping argv and parsers, on output captured in the VM (tests/data/transport/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.core.errors import InputError
from testbed.host.traffic.ping import (
    format_table,
    parse_ping,
    parse_ping_summary,
    ping_argv,
    summarize,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "transport"


def test_argv() -> None:
    assert ping_argv("10.0.0.2", interval=0.2, count=10, bind="10.0.1.1") == \
        ["ping", "-D", "-O", "-n", "-i", "0.2", "-s", "56", "-W", "1", "-c", "10",
         "-I", "10.0.1.1", "10.0.0.2"]
    assert ping_argv("h", duration=2.5)[-3:] == ["-w", "3", "h"]
    with pytest.raises(InputError, match="interval"):
        ping_argv("h", interval=0)


def test_all_replies() -> None:
    text = (DATA / "ping_D_O.txt").read_text()
    rows = parse_ping(text, src="client", dst="server", path="cell")
    assert [r["seq"] for r in rows] == list(range(1, 11))
    assert rows[0]["rtt_ms"] == 99.3 and not any(r["lost"] for r in rows)
    assert rows[0]["t"] == pytest.approx(1795285961.621272 - 0.0993)
    assert rows[0]["path"] == "cell"
    own = parse_ping_summary(text)
    mine = summarize(rows)
    assert (own["transmitted"], own["received"], own["loss_pct"]) == (10, 10, 0.0)
    for k in ("min_ms", "avg_ms", "max_ms", "mdev_ms"):
        assert mine[k] == pytest.approx(own[k], abs=0.06), k  # echo lines show 0.1 ms


def test_unanswered_echoes_are_lost_records() -> None:
    text = (DATA / "ping_unreach.txt").read_text()
    rows = parse_ping(text, interval=0.2)
    assert len(rows) == 5 and all(r["lost"] and r["rtt_ms"] is None for r in rows)
    assert rows[0]["t"] == pytest.approx(1795285966.668409 - 0.2)
    assert rows[4]["t"] == pytest.approx(rows[3]["t"] + 0.2, abs=0.05)
    s = summarize(rows)
    assert s["loss_pct"] == 100.0 and s["avg_ms"] is None
    assert parse_ping_summary(text)["min_ms"] is None


def test_lossy_link_capture() -> None:
    path = DATA / "ping_lossy.txt"
    if not path.exists():
        pytest.skip("no lossy capture")
    text = path.read_text()
    rows = parse_ping(text)
    own = parse_ping_summary(text)
    assert len(rows) == own["transmitted"]
    assert sum(not r["lost"] for r in rows) == own["received"]
    assert summarize(rows)["loss_pct"] == pytest.approx(own["loss_pct"], abs=0.5)


def test_table() -> None:
    rows = parse_ping((DATA / "ping_D_O.txt").read_text())
    table = format_table([summarize(rows, "cell"), summarize([], "empty")])
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["path", "transmitted", "received"]
    assert lines[1].split()[:4] == ["cell", "10", "10", "0.0"]
    assert lines[2].split() == ["empty", "0", "0", "-", "-", "-", "-", "-"]
