"""Packet capture: one tcpdump per chosen interface, confirmed ready, stopped cleanly.

::

    with CaptureSet(runner, pcap_dir=run / "pcap", logs_dir=run / "logs") as caps:
        caps.add(net.host("client"), "client-eth0")      # host=None: root namespace
        caps.add(net.host("client"), "client-eth1")
        caps.start()            # returns once every tcpdump printed "listening on"
        ... workload ...
    caps.stats                  # {"client-client-eth0.pcap": {captured, received, dropped}}

Files: ``pcap/<node>-<intf>.pcap`` (``<node>`` is the host name, or the switch name for
a root-namespace port such as ``s1-eth1``), ``logs/tcpdump-<node>-<intf>.log``.

tcpdump runs with ``-B 16384`` (a 16 MiB kernel
buffer: in a CPU-starved emulated VM the default 2 MiB overflowed and dropped packets),
block-wise delivery and buffered writes (see `tcpdump_argv`), ``-n``, ``-Z root`` (no
privilege
drop, so it can write wherever the bundle is) and snaplen 128 by default, which keeps
Ethernet + IPv4 + TCP with 40 bytes of options (MPTCP DSS/ADD_ADDR included).  It is
started before the workload and readiness is its "listening on" line on stderr
(printed once the capture is active).  Stopping first waits for every tcpdump to write
what the kernel has handed it (`drain`: its running counts, asked for with SIGUSR1),
then sends SIGINT so tcpdump flushes and closes the file; its "N packets captured /
received by filter / dropped by kernel" lines are parsed into `stats` (captured below
received: packets tcpdump never wrote).
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any

from testbed.core.capture_counts import shortfall
from testbed.core.commands import CommandRunner, in_parallel
from testbed.core.errors import InputError, RunError
from testbed.core.process import Process
from testbed.core.recording import recording
from testbed.core.transcript import Namespaced

DEFAULT_SNAPLEN = 128
DEFAULT_BUFFER_KIB = 16384  # tcpdump -B: absorbs bursts while tcpdump is starved of CPU
READY_TIMEOUT_S = 60.0
SETTLE_S = 0.3         # a capture file that has not grown this long has caught up
SETTLE_LIMIT_S = 5.0   # ... but never wait longer than this before stopping tcpdump
DRAIN_LIMIT_S = 120.0  # how long a stop waits for tcpdumps that are behind ...
DRAIN_STALL_S = 10.0   # ... as long as one of them still makes progress
_STAT = re.compile(r"(\d+) packets? (captured|received by filter|dropped by kernel)")


def tcpdump_argv(intf: str, path: Path, snaplen: int = DEFAULT_SNAPLEN,
                 bpf_filter: list[str] | None = None,
                 buffer_kib: int = DEFAULT_BUFFER_KIB) -> list[str]:
    """tcpdump argv writing interface intf to path.

    snaplen: bytes kept per packet; bpf_filter: optional filter expression tokens;
    buffer_kib: kernel capture buffer (``-B``).
    """
    if not 64 <= snaplen <= 262144:
        raise InputError(f"capture.snaplen: {snaplen}; use 64..262144")
    # Neither --immediate-mode nor -U (packet-buffered writes): with both, tcpdump woke
    # up and wrote once per packet, 10x the CPU of block-wise delivery and buffered
    # writes (0.5 vs 0.05 CPU-s per 100,000 packets), and under software emulation fell
    # 30-40 s behind a 25 Mbit/s run.  Without immediate mode the kernel hands over the
    # last, partly filled block up to a second late, and a tcpdump stopped by SIGINT
    # before then never writes it (a run once lost the last 276 of 1090 packets): `drain`
    # waits until tcpdump has written every packet the kernel counted, so the tail is in.
    return ["tcpdump", "-i", intf, "-s", str(snaplen), "-B", str(buffer_kib), "-n",
            "-Z", "root", "-w", str(path), *(bpf_filter or [])]


def parse_tcpdump_stats(text: str) -> dict[str, int | None]:
    """The closing statistics tcpdump prints on stderr -> captured/received/dropped."""
    out: dict[str, int | None] = {"captured": None, "received": None, "dropped": None}
    names = {"captured": "captured", "received by filter": "received",
             "dropped by kernel": "dropped"}
    for n, what in _STAT.findall(text):
        out[names[what]] = int(n)
    return out


def pcap_name(node: str, intf: str) -> str:
    """``<node>-<intf>.pcap``."""
    return f"{node}-{intf}.pcap"


class Capture:
    """tcpdump on one interface.

    runner: command runner; host: Mininet host owning intf (None: root namespace);
    intf: interface name; pcap_dir/logs_dir: bundle folders; snaplen: bytes per packet;
    node: name for the file (default: the host's name, or the switch part of intf).
    """

    def __init__(self, runner: CommandRunner, host: Namespaced | None, intf: str,
                 pcap_dir: Path, logs_dir: Path, snaplen: int = DEFAULT_SNAPLEN,
                 node: str | None = None, bpf_filter: list[str] | None = None):
        self.runner, self.host, self.intf = runner, host, intf
        self.node = node or (host.name if host is not None else intf.split("-")[0])
        self.path = Path(pcap_dir) / pcap_name(self.node, intf)
        self.log = Path(logs_dir) / f"tcpdump-{self.node}-{intf}.log"
        self.argv = tcpdump_argv(intf, self.path, snaplen, bpf_filter)
        self.proc: Process | None = None
        self.stats: dict[str, int | None] = {}
        self._offset = 0    # where this run's tcpdump output starts in the log
        self._answered = 0  # where the last answer to `counts` ends

    def _log_text(self, offset: int | None = None) -> str:
        if not self.log.exists():
            return ""
        with open(self.log, "rb") as f:
            f.seek(self._offset if offset is None else offset)
            return f.read().decode(errors="replace")

    def spawn(self) -> None:
        """Start tcpdump (without waiting for it)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._offset = self._answered = self._log_size()
        self.proc = self.runner.spawn(self.argv, host=self.host, log=self.log)

    def ready(self) -> bool:
        """True once tcpdump reported that it is listening; RunError if it died."""
        text = self._log_text()
        if "listening on" in text:
            return True
        if self.proc is not None and not self.proc.running():
            raise RunError(f"tcpdump on {self.node}:{self.intf} exited: "
                           f"{text.strip()[-300:] or 'no output'}")
        return False

    def counts(self, timeout: float = 2.0) -> dict[str, int | None] | None:
        """tcpdump's running counts, asked for with SIGUSR1 (it prints them and goes on):
        ``captured`` (written to the file) and ``received`` (handed over by the kernel).
        None when tcpdump is not running or does not answer within timeout."""
        if self.proc is None or not self.proc.running() or not self.ready():
            return None  # SIGUSR1 before tcpdump handles it would end it
        start = self._log_size()  # only an answer written after this signal counts
        if not self.proc.send(signal.SIGUSR1):
            return None
        deadline = time.time() + timeout
        while time.time() < deadline:
            text = self._log_text(start)
            if len(_STAT.findall(text)) >= 3 and text.endswith("\n"):
                self._answered = self._log_size()  # the closing counts come after this
                return parse_tcpdump_stats(text)
            time.sleep(0.02)
        return None

    def _log_size(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def unwritten(self, counts: dict[str, int | None]) -> int | None:
        """Packets the kernel handed tcpdump that it has not written, from `counts`."""
        short = shortfall(counts, loopback=self.intf == "lo")
        return None if short is None else short[1]

    def start(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Start tcpdump and wait until it captures (not in a dry run)."""
        self.spawn()
        if not recording(self.runner):
            _wait_ready([self], timeout)

    def stop(self, settle: float = SETTLE_S, limit: float = SETTLE_LIMIT_S
             ) -> dict[str, int | None]:
        """Let tcpdump catch up (its file stops growing for ``settle`` seconds, at most
        ``limit``), then SIGINT it (it closes the file cleanly); return its packet counts."""
        if self.proc is not None:
            if recording(self.runner):  # a dry run: tcpdump wrote nothing
                settle = 0
            if settle > 0:  # (a `CaptureSet` drains all its captures at once first)
                drain([self])
            _settle([self.path], settle, limit)
            self.proc.stop(sig=signal.SIGINT, timeout=10)
            self.proc = None
            # the closing counts only: not an earlier answer to `counts`
            self.stats = parse_tcpdump_stats(self._log_text(max(self._offset, self._answered)))
        return self.stats


def _settle(paths: list[Path], settle: float, limit: float) -> None:
    """Wait until no file of paths has grown for settle seconds (at most limit seconds)."""
    def size() -> list[int]:
        out = []
        for p in paths:
            try:
                out.append(p.stat().st_size)
            except OSError:
                out.append(-1)
        return out

    if not paths or settle <= 0:
        return
    end = time.time() + limit
    last, since = size(), time.time()
    while time.time() < end:
        time.sleep(min(0.05, settle))
        now = size()
        if now != last:
            last, since = now, time.time()
        elif time.time() - since >= settle:
            return


def drain(caps: list[Capture], limit: float = DRAIN_LIMIT_S,
          stall: float = DRAIN_STALL_S) -> dict[str, int]:
    """Wait until every tcpdump of caps has written every packet the kernel handed it.

    A tcpdump that a busy (or software-emulated) machine starves falls thousands of
    packets behind; SIGINT ends it without writing them (seen: 5831 of 9963 packets of a
    run's server capture).  Waits while any capture still makes progress, at most limit
    seconds, giving up after stall seconds without progress.  Returns the packets still
    unwritten per capture file that did not catch up (empty when all did).
    """
    end = time.time() + limit
    pending = list(caps)
    behind: dict[str, int] = {}
    last: dict[str, int] = {}
    progress = time.time()
    while pending:
        still = []
        # every tcpdump asked at once: each answer takes a wake-up of its own
        answers = in_parallel(lambda c: c.counts(), pending, workers=len(pending))
        for c, n in zip(pending, answers, strict=True):
            left = None if n is None else c.unwritten(n)
            if left is None:
                if c.proc is not None and c.proc.running():
                    still.append(c)  # too starved to answer: wait, as long as others progress
                continue
            if left == 0:
                behind.pop(c.path.name, None)
                continue
            behind[c.path.name] = left
            if n["captured"] != last.get(c.path.name):
                last[c.path.name] = n["captured"]
                progress = time.time()
            still.append(c)
        pending = still
        now = time.time()
        if not pending or now >= end or now - progress >= stall:
            break
        time.sleep(0.2)
    return {name: n for name, n in behind.items() if any(c.path.name == name for c in pending)}


def _wait_ready(caps: list[Capture], timeout: float) -> None:
    deadline = time.time() + timeout
    pending = list(caps)
    while pending:
        pending = [c for c in pending if not c.ready()]
        if not pending:
            return
        if time.time() > deadline:
            names = ", ".join(f"{c.node}:{c.intf}" for c in pending)
            raise RunError(f"tcpdump not ready after {timeout:g}s on {names}")
        time.sleep(0.05)


class CaptureSet:
    """Several `Capture` s started together and always stopped (context manager)."""

    def __init__(self, runner: CommandRunner, pcap_dir: Path, logs_dir: Path,
                 snaplen: int = DEFAULT_SNAPLEN):
        self.runner, self.pcap_dir, self.logs_dir, self.snaplen = (runner, Path(pcap_dir),
                                                                    Path(logs_dir), snaplen)
        self.captures: list[Capture] = []
        self.stats: dict[str, dict[str, int | None]] = {}

    def add(self, host: Namespaced | None, intf: str, node: str | None = None) -> Capture:
        """Plan a capture on intf of host (None: root namespace)."""
        cap = Capture(self.runner, host, intf, self.pcap_dir, self.logs_dir, self.snaplen,
                      node)
        if any(c.path == cap.path for c in self.captures):
            raise InputError(f"capture: {cap.node}:{intf} is listed twice")
        self.captures.append(cap)
        return cap

    def start(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Start every capture and return once all are listening."""
        self.spawn()
        self.wait_ready(timeout)

    def spawn(self) -> None:
        """Start every capture without waiting (then `wait_ready`)."""
        for c in self.captures:
            c.spawn()

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Return once every spawned capture is listening (at once in a dry run)."""
        if not recording(self.runner):
            _wait_ready(self.captures, timeout)

    def stop(self) -> dict[str, dict[str, int | None]]:
        """Stop every capture once all have caught up; stats per pcap file name."""
        running = [c for c in self.captures if c.proc is not None]
        if not recording(self.runner):
            drain(running)
            _settle([c.path for c in running], SETTLE_S, SETTLE_LIMIT_S)
        # SIGINT to all, each then waited for (a fat-tree run captures on 16 hosts)
        caps = list(self.captures)
        for c, st in zip(caps, in_parallel(lambda c: c.stop(settle=0), caps,
                                           workers=max(1, len(caps))), strict=True):
            self.stats[c.path.name] = st
        return self.stats

    def __enter__(self) -> CaptureSet:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
