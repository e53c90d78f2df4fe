"""Shared fixtures for integration tests (root + kernel features; run in `testbed vm`).

Use::

    pytestmark = [pytest.mark.integration, pytest.mark.needs_kernel("netem", "ovs")]

    def test_x(make_network, runner, measure):
        net = make_network(topo)            # started; stopped after the test
        h1 = net.host("h1")
        rtts = measure.ping(runner, h1, "10.0.0.2", count=10)

Features for ``needs_kernel``: ``netem`` (sch_netem + sch_tbf), ``ovs`` (openvswitch
module and a running ovs-vswitchd), ``mptcp`` (net.mptcp.enabled = 1), ``nft``, ``bpf_cc``
(the coupled congestion controls: BTF, kernel >= 5.19, clang/bpftool/libbpf).  Every
integration test also needs root and Mininet's ``mnexec``; a test skips with the reason
when something is missing.

Measurement helpers come through the ``measure`` fixture (so tests need not import
this conftest): ``measure.iperf3(...)``, ``measure.ping(...)``,
``measure.netdev_bytes(pid, intf)``, ``measure.binomial_interval(n, p)``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.core.commands import CommandRunner, which
from testbed.net.network import Network

FEATURES = ("netem", "ovs", "mptcp", "nft", "bpf_cc")
ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "results" / "ci-reproduction"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs_kernel(*features): skip unless the kernel "
                            f"and tools offer these ({', '.join(FEATURES)})")


def _modprobe(runner: CommandRunner, *modules: str) -> bool:
    return all(Path(f"/sys/module/{m}").exists() or runner.ok(["modprobe", "-q", m],
                                                              record=False)
               for m in modules)


def missing_feature(feature: str, runner: CommandRunner | None = None) -> str | None:
    """Why ``feature`` is unavailable here, or None when it is available."""
    runner = runner or CommandRunner()
    if feature == "netem":
        if not _modprobe(runner, "sch_netem", "sch_tbf"):
            return "kernel lacks sch_netem/sch_tbf (run in `testbed vm`)"
    elif feature == "ovs":
        if not _modprobe(runner, "openvswitch"):
            return "kernel lacks the openvswitch module (run in `testbed vm`)"
        if not runner.ok(["ovs-vsctl", "--timeout=5", "show"], record=False):
            return "ovs-vswitchd is not running (start it with ovs-ctl, or use `testbed vm`)"
    elif feature == "mptcp":
        try:
            if Path("/proc/sys/net/mptcp/enabled").read_text().strip() != "1":
                return "net.mptcp.enabled is 0"
        except OSError:
            return "kernel has no MPTCP"
    elif feature == "bpf_cc":
        from testbed.machine.bpf_support import coupled_problems

        problems = coupled_problems()
        if problems:
            return "; ".join(problems)
    elif feature == "nft":
        if which("nft") is None:
            return "nft is not installed"
    else:
        raise ValueError(f"unknown feature {feature!r}; use {FEATURES}")
    return None


def _unavailable(reason: str) -> None:
    """Skip with reason -- or fail inside the testbed VM (or with TESTBED_REQUIRE_ALL=1),
    where everything must be present: a skip there would turn a broken VM green."""
    if os.environ.get("TESTBED_IN_VM") == "1" or os.environ.get("TESTBED_REQUIRE_ALL") == "1":
        pytest.fail(f"unavailable where everything must be present: {reason}")
    pytest.skip(reason)


@pytest.fixture(autouse=True)
def _integration_preconditions(request: pytest.FixtureRequest) -> None:
    """Skip integration tests, with the reason, when root/tools/features are missing."""
    if request.node.get_closest_marker("integration") is None:
        return
    if os.geteuid() != 0:
        _unavailable("needs root (run: testbed vm -- .venv/bin/pytest -m integration ...)")
    for tool in ("mnexec", "tc", "ip"):
        if which(tool) is None:
            _unavailable(f"{tool} is not installed (scripts/install)")
    marker = request.node.get_closest_marker("needs_kernel")
    for feature in (marker.args if marker else ()):
        why = missing_feature(feature)
        if why:
            _unavailable(why)


@pytest.fixture
def runner() -> Iterator[CommandRunner]:
    """A fresh CommandRunner; its background processes are stopped after the test."""
    r = CommandRunner()
    yield r
    r.stop_all()


@pytest.fixture
def make_network(runner: CommandRunner, tmp_path: Path) -> Iterator[Callable[..., Network]]:
    """Factory: ``make_network(topo, **Network kwargs)`` -> a started `Network`.

    Each network gets its own workdir under tmp_path and is stopped after the test.
    """
    nets: list[Network] = []

    def make(topo: Any, **kw: Any) -> Network:
        kw.setdefault("workdir", tmp_path / f"net{len(nets)}")
        net = Network(topo, runner=runner, **kw)
        nets.append(net)
        return net.start()

    yield make
    for net in reversed(nets):
        net.stop()


# -- measurement helpers -------------------------------------------------------------

def iperf3_run(runner: CommandRunner, client: Any, server: Any, server_addr: str,
               seconds: float = 5, bind: str | None = None, udp_rate: str | None = None,
               omit: int = 1, port: int = 5201, extra: tuple[str, ...] = ()) -> dict:
    """Run one iperf3 test client -> server and return iperf3's JSON result.

    client/server: Mininet hosts; server_addr: where the client connects; bind: the
    client's source address; udp_rate: e.g. "2M" for a UDP test; omit: seconds left out
    at the start (TCP slow start).
    """
    srv = runner.spawn(["iperf3", "-s", "-1", "-p", str(port)], host=server)
    try:
        argv = ["iperf3", "-c", server_addr, "-p", str(port), "-J", "-t", str(seconds)]
        if bind:
            argv += ["-B", bind]
        if udp_rate:
            argv += ["-u", "-b", udp_rate, "-l", "1200"]
        elif omit:
            argv += ["-O", str(omit)]
        argv += list(extra)
        deadline = time.time() + 60  # a slow (emulated) VM takes a while to start iperf3
        while not runner.run(["ss", "-Hltn", f"sport = :{port}"], host=server,
                             check=False, record=False).stdout.strip():
            if time.time() > deadline or not srv.running():
                raise AssertionError(f"iperf3 server on port {port} never listened")
            time.sleep(0.1)
        res = runner.run(argv, host=client, timeout=seconds + 60, check=False)
        data = json.loads(res.stdout) if res.stdout.strip().startswith("{") else {}
        if res.returncode != 0 or data.get("error"):
            raise AssertionError(f"iperf3 failed: {data.get('error') or res.stdout[-500:]} "
                                 f"{res.stderr[-500:]}")
        return data
    finally:
        srv.stop()


def ping_rtts(runner: CommandRunner, host: Any, addr: str, count: int = 10,
              interval: float = 0.2, source: str | None = None) -> list[float | None]:
    """Ping addr from host; RTT in ms per echo (None when lost).

    First waits (at most 8 s) until the CPUs are quiet, as a run does before its clock
    starts (the kernel tears a previous test's namespaces down in the background; a CI
    run's median read 3.2 ms over 20 ms right after a network was built)."""
    from testbed.run.readiness import wait_quiet

    wait_quiet()
    argv = ["ping", "-n", "-c", str(count), "-i", str(interval), "-W", "2"]
    if source:
        argv += ["-I", source]
    out = runner.run([*argv, addr], host=host, timeout=count * interval + 30,
                     check=False).stdout
    rtts: dict[int, float] = {}
    for line in out.splitlines():
        if "icmp_seq=" in line and "time=" in line:
            seq = int(line.split("icmp_seq=")[1].split()[0])
            rtts[seq] = float(line.split("time=")[1].split()[0])
    return [rtts.get(i) for i in range(1, count + 1)]


def netdev_bytes(pid: int, intf: str) -> tuple[int, int]:
    """(rx_bytes, tx_bytes) of intf as seen from the network namespace of process pid."""
    for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == intf:
            f = rest.split()
            return int(f[0]), int(f[8])
    raise KeyError(intf)


def binomial_interval(n: int, p: float, level: float = 0.99) -> tuple[int, int]:
    """The central interval [lo, hi] holding at least ``level`` of Binomial(n, p)."""
    from math import exp, lgamma, log

    pmf = [exp(lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1) + k * log(p)
               + (n - k) * log(1 - p)) for k in range(n + 1)]
    tail = (1 - level) / 2
    lo, acc = 0, 0.0
    while acc + pmf[lo] < tail:
        acc += pmf[lo]
        lo += 1
    hi, acc = n, 0.0
    while acc + pmf[hi] < tail:
        acc += pmf[hi]
        hi -= 1
    return lo, hi


class Measure:
    """The helpers above, as one fixture value."""

    iperf3 = staticmethod(iperf3_run)
    ping = staticmethod(ping_rtts)
    netdev_bytes = staticmethod(netdev_bytes)
    binomial_interval = staticmethod(binomial_interval)


@pytest.fixture
def measure() -> Measure:
    """iperf3 / ping / interface-counter / binomial helpers (see the module docstring)."""
    return Measure()


@pytest.fixture(scope="session")
def studies_out() -> Path:
    """Run every study's quick variant once, through the real command line; their
    results folder (``<study>-quick`` each, in ``results/ci-reproduction/runs``).

    Shared by the reproduction tests and the documented-commands test (one set of runs,
    one VM boot where the kernel needs it).  ``TESTBED_STUDIES_OUT=DIR`` uses the runs
    already in DIR (the layout above, e.g. an earlier CI run's) instead of running them,
    to re-check the documentation or the claims after a change to the analysis."""
    given = os.environ.get("TESTBED_STUDIES_OUT")
    RECORD.mkdir(parents=True, exist_ok=True)  # the tests' records of what they measured
    if given:
        return Path(given)
    out = RECORD / "runs"
    studies = sorted(p.parent.name for p in (ROOT / "experiments").glob("*/study.py"))
    exe = Path(sys.prefix) / "bin" / "testbed"
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "testbed.cli"]
    argv += ["study", *(str(ROOT / "experiments" / s) for s in studies),
             "--variant", "quick", "--out", str(out)]
    shutil.rmtree(out, ignore_errors=True)  # fresh runs, not a resume of an older set
    RECORD.mkdir(parents=True, exist_ok=True)
    # a line per run phase, shown live with `pytest -s` (scripts/test) and kept in a log
    with open(RECORD / "studies.log", "w") as log, subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                log.write(line)
                print(line, end="", flush=True)
        except BaseException:
            proc.terminate()  # `testbed study` stops its VM on SIGTERM
            raise
        rc = proc.wait()
    assert rc in (0, 1), f"testbed study exited {rc}; see {RECORD / 'studies.log'}"
    return out
