"""Capture: tcpdump argv, readiness from its stderr, clean stop, statistics parser."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testbed.core.errors import InputError, RunError
from testbed.host.capture import (
    Capture,
    CaptureSet,
    drain,
    parse_tcpdump_stats,
    pcap_name,
    tcpdump_argv,
)

STATS = """tcpdump: listening on client-eth0, link-type EN10MB (Ethernet), snapshot length 128 bytes
^C
1502 packets captured
1510 packets received by filter
8 packets dropped by kernel
"""


def test_argv_and_names() -> None:
    assert tcpdump_argv("client-eth0", Path("pcap/client-client-eth0.pcap")) == \
        ["tcpdump", "-i", "client-eth0", "-s", "128", "-B", "16384", "-n",
         "-Z", "root", "-w", "pcap/client-client-eth0.pcap"]
    assert tcpdump_argv("s1-eth1", Path("x.pcap"), 256, ["tcp"])[-1] == "tcp"
    assert pcap_name("client", "client-eth1") == "client-client-eth1.pcap"
    with pytest.raises(InputError, match="snaplen"):
        tcpdump_argv("eth0", Path("x"), 10)


def test_stats_parser() -> None:
    assert parse_tcpdump_stats(STATS) == {"captured": 1502, "received": 1510, "dropped": 8}
    assert parse_tcpdump_stats("1 packet captured\n") == \
        {"captured": 1, "received": None, "dropped": None}


@dataclass
class Host:
    name: str = "client"
    pid: int = 1


@dataclass
class FakeProc:
    log: Path
    alive: bool = True
    signals: list[int] = field(default_factory=list)

    def running(self) -> bool:
        return self.alive

    behind: list[int] = field(default_factory=list)  # unwritten packets per SIGUSR1 answer

    def send(self, sig: int) -> bool:
        """SIGUSR1: print running counts as tcpdump does (1510 received, `behind` unwritten)."""
        assert sig == signal.SIGUSR1 and self.alive
        left = self.behind.pop(0) if self.behind else 0
        with open(self.log, "a") as f:
            f.write(f"tcpdump: {1510 - left} packets captured, 1510 packets received by "
                    "filter, 0 packets dropped by kernel\n")
        return True

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 5.0) -> int:
        self.signals.append(sig)
        self.alive = False
        with open(self.log, "a") as f:
            f.write(STATS.split("\n", 1)[1])
        return 0


@dataclass
class FakeRunner:
    """spawn() writes what tcpdump would print once listening (or dies at once)."""

    die: bool = False
    procs: list[FakeProc] = field(default_factory=list)
    argvs: list[list[str]] = field(default_factory=list)

    def spawn(self, argv, host=None, log=None, **_kw) -> FakeProc:
        self.argvs.append(list(argv))
        with open(log, "a") as f:
            f.write("tcpdump: eth9: No such device exists\n" if self.die else
                    "tcpdump: listening on x, link-type EN10MB (Ethernet), snapshot length "
                    "128 bytes\n")
        p = FakeProc(Path(log), alive=not self.die)
        self.procs.append(p)
        return p


def test_capture_set_start_stop(tmp_path: Path) -> None:
    r = FakeRunner()
    with CaptureSet(r, tmp_path / "pcap", tmp_path / "logs") as caps:
        caps.add(Host(), "client-eth0")
        caps.add(None, "s1-eth1")
        caps.start(timeout=2)
        with pytest.raises(InputError, match="listed twice"):
            caps.add(Host(), "client-eth0")
    assert [p.signals for p in r.procs] == [[signal.SIGINT], [signal.SIGINT]]
    assert set(caps.stats) == {"client-client-eth0.pcap", "s1-s1-eth1.pcap"}
    assert caps.stats["s1-s1-eth1.pcap"]["dropped"] == 8


def test_second_capture_does_not_see_the_old_ready_line(tmp_path: Path) -> None:
    r = FakeRunner()
    c = Capture(r, Host(), "client-eth0", tmp_path, tmp_path)
    c.start(timeout=2)
    c.stop()
    r.die = True
    c2 = Capture(r, Host(), "client-eth0", tmp_path, tmp_path)
    with pytest.raises(RunError, match="No such device"):
        c2.start(timeout=2)


def test_stop_waits_for_a_tcpdump_that_is_behind(tmp_path: Path) -> None:
    r = FakeRunner()
    with CaptureSet(r, tmp_path / "pcap", tmp_path / "logs") as caps:
        caps.add(Host(), "client-eth0")
        caps.add(None, "s1-eth1")
        caps.start(timeout=2)
        r.procs[0].behind = [900, 400, 10]  # catching up: asked until it has written all
    assert r.procs[0].behind == [] and r.procs[0].signals == [signal.SIGINT]


def test_drain_gives_up_on_a_tcpdump_that_makes_no_progress(tmp_path: Path) -> None:
    r = FakeRunner()
    c = Capture(r, Host(), "client-eth0", tmp_path, tmp_path)
    c.start(timeout=2)
    r.procs[0].behind = [50] * 1000
    assert drain([c], limit=30, stall=0.5) == {"client-client-eth0.pcap": 50}
    assert len(r.procs[0].behind) > 990  # stopped asking soon after progress stopped
    r.procs[0].behind = [0]
    assert drain([c], limit=30, stall=0.5) == {}


def test_unwritten_leaves_out_kernel_drops_and_loopback_copies(tmp_path: Path) -> None:
    veth = Capture(FakeRunner(), Host(), "client-eth0", tmp_path, tmp_path)
    assert veth.unwritten({"captured": 900, "received": 1000, "dropped": 100}) == 0
    assert veth.unwritten({"captured": 800, "received": 1000, "dropped": 100}) == 100
    assert veth.unwritten({"captured": 5, "received": None, "dropped": 0}) is None
    lo = Capture(FakeRunner(), None, "lo", tmp_path, tmp_path)
    assert lo.unwritten({"captured": 6, "received": 12, "dropped": 0}) == 0
    assert lo.unwritten({"captured": 4, "received": 12, "dropped": 0}) == 2


def test_closing_stats_are_not_taken_from_an_earlier_answer(tmp_path: Path) -> None:
    r = FakeRunner()
    c = Capture(r, Host(), "client-eth0", tmp_path, tmp_path)
    c.start(timeout=2)
    assert c.counts() == {"captured": 1510, "received": 1510, "dropped": 0}
    r.procs[0].stop = lambda sig=None, timeout=None: 0  # dies without its closing lines
    c.stop(settle=0)
    assert c.stats == {"captured": None, "received": None, "dropped": None}
