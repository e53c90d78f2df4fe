"""testbed.net.steering: receive packet steering masks and commands."""

from __future__ import annotations

import pytest

from testbed.net.steering import cpu_mask, parse_cpu_list, parse_rps_masks, rps_command


def test_cpu_lists_and_masks():
    assert parse_cpu_list("0-1\n") == [0, 1]
    assert parse_cpu_list("0-3,6") == [0, 1, 2, 3, 6]
    assert cpu_mask([0, 1]) == "3"
    assert cpu_mask([0]) == "1"
    assert cpu_mask(range(32)) == "ffffffff"
    assert cpu_mask([0, 33]) == "2,00000001"
    with pytest.raises(ValueError):
        cpu_mask([])


def test_rps_command_names_only_our_interfaces():
    argv = rps_command(["s1-eth1", "s1-eth2"], "3")
    assert argv[:2] == ["sh", "-c"] and argv[3:] == ["rps", "3", "s1-eth1", "s1-eth2"]
    for bad in (["../../x"], ["a b"], ["*"], [".."]):
        with pytest.raises(ValueError):
            rps_command(bad, "3")
    with pytest.raises(ValueError):
        rps_command(["s1-eth1"], "3; reboot")


def test_parse_rps_masks():
    assert parse_rps_masks("s1-eth1 3\nS0-eth0 00000000,00000003\n") == {
        "s1-eth1": 3, "S0-eth0": 3}
