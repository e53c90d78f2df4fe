"""Golden tests for the tc command builders and the shape model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.core.errors import InputError
from testbed.net import shaping as sh

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "shaping" / "golden.json").read_text())


def _shape(fields: dict) -> sh.LinkShape:
    """A `LinkShape` from the golden file's fields (base units)."""
    model = fields.get("loss_model")
    return sh.LinkShape(**{**fields, "loss_model": sh.GilbertElliott(**model) if model else None})


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_setup_commands_golden(case: str) -> None:
    shape = _shape(GOLDEN[case]["shape"])
    assert sh.setup_commands("s1-eth1", shape) == GOLDEN[case]["setup"]


def test_change_touches_only_what_differs() -> None:
    old = sh.LinkShape(bw_bps=10_000_000, delay_s=0.01, queue_pkts=100)
    assert sh.change_commands("x", old, old) == []
    new_bw = old.changed(bw_bps=2_000_000)
    assert sh.change_commands("x", old, new_bw) == [
        ["tc", "qdisc", "change", "dev", "x", "parent", "1:1", "handle", "2:", "tbf",
         "rate", "2000000bit", "burst", "2500", "limit", "100"]]
    new_delay = old.changed(delay_s=0.07)
    assert sh.change_commands("x", old, new_delay) == [
        ["tc", "qdisc", "change", "dev", "x", "root", "handle", "1:", "netem",
         "delay", "70000us", "limit", "1000"]]


def test_loss_back_to_zero_is_a_full_netem_change() -> None:
    lossy = sh.LinkShape(bw_bps=10_000_000, delay_s=0.02, loss_pct=5.0)
    clean = lossy.changed(loss_pct=0.0)
    cmds = sh.change_commands("x", lossy, clean)
    assert cmds == [["tc", "qdisc", "change", "dev", "x", "root", "handle", "1:", "netem",
                     "delay", "20000us", "limit", "1034"]]
    assert "loss" not in cmds[0]  # netem's change resets loss to 0 when it is not given


def test_queue_change_reaches_tbf_and_netem_limit() -> None:
    old = sh.LinkShape(bw_bps=10_000_000, delay_s=0.01, queue_pkts=100)
    new = old.changed(queue_pkts=2000)
    cmds = sh.change_commands("x", old, new)
    assert ["netem" in c for c in cmds] == [True, False]
    assert ["tbf" in c for c in cmds] == [False, True]
    assert cmds[0][-2:] == ["limit", "2018"]  # 2 x 9 packets on the delay line + Q
    assert cmds[1][-2:] == ["limit", "2000"]


def test_netem_limit_never_drops_for_delay() -> None:
    # 100 Mbit/s, 200 ms: 1652 full packets on the delay line
    shape = sh.LinkShape(bw_bps=100_000_000, delay_s=0.2, queue_pkts=10)
    assert sh.netem_limit(shape) >= 100_000_000 * 0.2 / (8 * sh.MTU_BYTES) + 10
    assert sh.netem_limit(sh.LinkShape()) == sh.NETEM_MIN_LIMIT


def test_burst_scales_with_rate_and_has_floor() -> None:
    assert sh.burst_for(sh.LinkShape(bw_bps=1_000_000)) == sh.MTU_BYTES   # one frame
    assert sh.burst_for(sh.LinkShape(bw_bps=2_000_000)) == 2500            # 10 ms
    assert sh.burst_for(sh.LinkShape(bw_bps=100_000_000)) == 125_000
    assert sh.burst_for(sh.LinkShape(bw_bps=1_000_000, burst_bytes=9000)) == 9000


def test_jitter_reorder_flag() -> None:
    reorder = sh.netem_params(sh.LinkShape(delay_s=0.01, jitter_s=0.002))
    keep = sh.netem_params(sh.LinkShape(delay_s=0.01, jitter_s=0.002, jitter_reorder=False))
    assert "rate" not in reorder
    assert keep[keep.index("rate") + 1] == "10000000000bit"


def test_rtt_is_sum_of_one_way_delays() -> None:
    assert sh.LinkShape(delay_s=0.02).rtt_s() == pytest.approx(0.04)


def test_gilbert_elliott_mean_loss() -> None:
    ge = sh.GilbertElliott(p_pct=1, r_pct=9)
    assert ge.mean_loss_pct() == pytest.approx(10.0)


@pytest.mark.parametrize("data, words", [
    ({"bw_bps": 500}, "bw=500 bit/s is out of range; use 1kbit .. 10Gbit"),
    ({"delay_s": -0.001}, "delay=-0.001s is out of range"),
    ({"loss_pct": 120}, "use 0% .. 100%"),
    ({"queue_pkts": 0}, "queue"),
    ({"jitter_s": 0.001, "jitter_distribution": "gauss"}, "distribution"),
    ({"loss_pct": 1, "loss_model": sh.GilbertElliott(1, 10)}, "not both"),
    ({"burst_bytes": 100}, "MTU"),
])
def test_bad_shapes_name_the_problem(data: dict, words: str) -> None:
    with pytest.raises(InputError) as err:
        sh.LinkShape(**data)
    assert words in str(err.value)


def test_bad_gilbert_elliott_names_the_parameter() -> None:
    with pytest.raises(InputError, match="r_pct=101 must be between 0 and 100"):
        sh.GilbertElliott(1, 101)


def test_batch_text_and_guards() -> None:
    cmds = sh.setup_commands("s1-eth1", sh.LinkShape(bw_bps=1_000_000))
    text = sh.batch_text(cmds)
    assert text.splitlines()[0].startswith("qdisc add dev s1-eth1 root handle 1: netem")
    assert len(text.splitlines()) == 3
    with pytest.raises(ValueError):
        sh.batch_text([["tc", "qdisc"], ["ip", "link"]])
    with pytest.raises(ValueError):
        sh.batch_text([["tc", "qdisc", "a b"]])


def test_link_state_and_offload_commands() -> None:
    assert sh.link_state_command("s1-eth1", False) == ["ip", "link", "set", "dev", "s1-eth1",
                                                       "down"]
    assert sh.offload_command("h1-eth0") == ["ethtool", "-K", "h1-eth0", "tso", "off", "gso",
                                             "off", "gro", "off"]


def test_mininet_params_round_trip() -> None:
    shape = sh.LinkShape(bw_bps=5_000_000, delay_s=0.04, jitter_s=0.001, loss_pct=1.0,
                         queue_pkts=200)
    assert sh.shape_from_mininet_params(sh.mininet_params(shape)) == shape
    assert sh.shape_from_mininet_params({}) is None
    assert sh.shape_from_mininet_params({"shape": shape, "bw": 1}) is shape
