"""iperf3 argv builders and the JSON report parser (report captured in the 6.1 VM)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.core.errors import InputError
from testbed.host.traffic.iperf import iperf3_client_argv, iperf3_server_argv, parse_iperf3_json

DATA = Path(__file__).resolve().parents[1] / "data" / "transport"


def test_argv() -> None:
    assert iperf3_server_argv(5201, "mptcp") == \
        ["mptcpize", "run", "iperf3", "-s", "-1", "-p", "5201"]
    assert iperf3_server_argv(5201) == ["iperf3", "-s", "-1", "-p", "5201"]
    assert iperf3_client_argv("10.0.100.1", 5201, protocol="mptcp", duration=6) == \
        ["mptcpize", "run", "iperf3", "-c", "10.0.100.1", "-p", "5201", "-J", "-t", "6"]
    assert iperf3_client_argv("h", 1, size=1000, parallel=4, cc="reno", bind="10.0.1.1") == \
        ["iperf3", "-c", "h", "-p", "1", "-J", "-n", "1000", "-P", "4", "-C", "reno",
         "-B", "10.0.1.1"]
    assert iperf3_client_argv("h", 1)[-2:] == ["-t", "10"]
    with pytest.raises(InputError, match="not both"):
        iperf3_client_argv("h", 1, size=1, duration=1)


def test_parse_captured_report() -> None:
    text = (DATA / "iperf3_mptcpize_client.json").read_text()
    raw = json.loads(text)["end"]
    res = parse_iperf3_json(text)
    assert res["bytes_received"] == raw["sum_received"]["bytes"]
    assert res["bytes_sent"] == raw["sum_sent"]["bytes"]
    assert res["goodput_bps"] == pytest.approx(raw["sum_received"]["bits_per_second"],
                                               rel=1e-3)
    assert res["cc"] == "cubic" and res["error"] is None
    assert res["local_host"] == "10.0.1.1" and res["start_epoch"] > 1.7e9


def test_parse_errors() -> None:
    assert "not JSON" in parse_iperf3_json("iperf3: error")["error"]
    res = parse_iperf3_json('{"start": {}, "end": {}, "error": "unable to connect"}')
    assert res["error"] == "unable to connect" and res["goodput_bps"] is None
