"""testbed.cleanup: the manifest and the process lookups the clean-up relies on."""

from __future__ import annotations

import os
from pathlib import Path

from testbed import cleanup as cl


def test_manifest_round_trip(tmp_path: Path) -> None:
    m = cl.Manifest(hosts={"h1": 10}, netns={"h1": 4026532000}, switches={"s1": 11},
                    interfaces=["h1-eth0", "s1-eth1"], bridges=["s1"],
                    nft_tables=[["netdev", "spray_s1"]])
    m.write(tmp_path / "network.json")
    assert cl.Manifest.read(tmp_path / "network.json") == m


def test_netns_lookup_finds_this_process_namespace() -> None:
    mine = cl.netns_inode(os.getpid())
    assert mine is not None
    assert cl.netns_inode(2**22 + 12345) is None
    # our own pid is never reported (we must not kill ourselves)
    assert os.getpid() not in cl.pids_in_netns({mine})


def test_is_mininet_shell_checks_the_cmdline() -> None:
    assert not cl.is_mininet_shell(os.getpid(), "h1")
