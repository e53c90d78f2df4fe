"""``testbed run --dry-run``: the commands a run would execute, from the real code path.

`dry_run_commands` carries the run out with `testbed.run.execute.execute_run`, the code
every real run goes through, and a `testbed.core.recording.RecordingRunner`: the
network, the controller, the transport set-up, captures, samplers, flow tools, pings and
the link schedule issue their commands as in a real run, and the runner records them
and executes none (no root needed, nothing is made).  Mininet's own node and veth
creation is not listed, as it is not in a real run's transcript; nor are the queries a
real run does not record (their answers come from `SystemAnswers`).  The bundle the run
writes goes to a temporary folder; paths in the commands name the run's real folder.

What the run reads of the kernel comes from the facts of the kernel the run would use
(`testbed.machine.kernel`; the dry run checked the spec against them first): its
congestion controls (a ``modprobe tcp_<name>`` provides a loadable one) and its MPTCP
scheduler sysctls.  Without such facts (no record of the VM's kernel) nothing is refused:
this machine's values are read, a ``modprobe`` is taken to succeed and any scheduler to
be settable.

A real run's transcript lists the same commands (`tests/integration/test_dry_run_real.py`
compares them), apart from process ids, times and what a real run's timing decides: a
flow that ends early with ``stop_when_done``, a capture that needs draining.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from testbed.core.commands import CommandRunner
from testbed.core.recording import RecordingRunner
from testbed.core.transcript import Transcript, TranscriptEntry
from testbed.host.mptcp import AVAILABLE_SCHEDULERS, SCHEDULER_SYSCTL, join_reads, split_reads
from testbed.host.transport import AVAILABLE_CC
from testbed.machine.kernel import KernelFacts
from testbed.results.bundle import Bundle
from testbed.run.execute import execute_run
from testbed.spec.model import CustomTopology
from testbed.spec.sweep import RunPlan

OVS_VERSION = "ovs-vsctl (Open vSwitch) 3.1.0"


class SystemAnswers:
    """What a dry run's commands print, so that the code after them takes a real run's
    path: sysctls read back as written (else as this machine has them), the OVS bridges
    (none before the network starts, all of them after), the nftables tables made, the
    policy-routing rules added in each namespace.  The rest of a host's state (routes,
    MPTCP limits and endpoints) reads as empty: a network kept for the next run compares
    it with its baseline at the end of a run, and puts back what a real run changed, so
    those restoring commands are in a real run's transcript only.

    switches: the topology's switch names; kernel: the facts of the kernel the run would
    use (None: this machine's values, and every ``modprobe tcp_<name>`` succeeds).
    """

    def __init__(self, switches: list[str], kernel: KernelFacts | None = None):
        self.switches = switches
        self.kernel = kernel
        self.loaded: list[str] = []  # congestion controls a recorded modprobe provided
        self.sysctl: dict[tuple[str, str], str] = {}
        self.tables: dict[tuple[str, str], str] = {}  # made -> its comment line
        self.rules: dict[str, list[tuple[str, str, str]]] = {}  # per namespace
        self.bridges_asked = False

    def __call__(self, argv: list[str], where: str, input: str | None) -> str:
        reads = split_reads(argv)  # a few reads in one program start: each answered
        if reads is not None:
            return join_reads([(name, self(cmd, where, None)) for name, cmd in reads])
        if argv[:1] == ["sysctl"]:
            return self._sysctl(argv[1:], where)
        if argv[:1] == ["modprobe"] and argv[-1].startswith("tcp_"):
            cc = argv[-1].removeprefix("tcp_")
            if self.kernel is None or cc in self.kernel.offered_ccs():
                self.loaded.append(cc)
            return ""
        if argv == ["ovs-vsctl", "--version"]:
            return OVS_VERSION + "\n"
        if argv == ["ovs-dpctl", "show"]:
            return "system@ovs-system:\n  lookups: hit:0 missed:0 lost:0\n"
        if "list-br" in argv:  # the first time before the bridges exist, then after
            out = "\n".join(self.switches) if self.bridges_asked else ""
            self.bridges_asked = True
            return out
        if argv[:3] == ["ip", "rule", "add"] and "from" in argv and "table" in argv:
            self.rules.setdefault(where, []).append(
                (argv[argv.index("priority") + 1] if "priority" in argv else "32765",
                 argv[argv.index("from") + 1], argv[argv.index("table") + 1]))
            return ""
        if argv == ["ip", "rule", "show"]:
            return "".join(f"{p}:\tfrom {s} lookup {t}\n" for p, s, t in self.rules.get(where, []))
        if argv == ["nft", "list", "tables"]:
            return "".join(f"table {f} {n}\n" for f, n in sorted(self.tables))
        if argv == ["nft", "list", "ruleset"]:  # with each table's comment (its tag)
            return "".join(f"table {f} {n} {{\n" + (f"\t{c}\n" if c else "") + "}\n"
                           for (f, n), c in sorted(self.tables.items()))
        if argv[:2] == ["nft", "-f"] and input:
            last: tuple[str, str] | None = None
            for line in input.splitlines():
                words = line.split()
                if len(words) >= 3 and words[0] == "table":
                    last = (words[1], words[2])
                    self.tables[last] = ""
                elif last is not None and words[:1] == ["comment"]:
                    self.tables[last] = line.strip()
                elif len(words) >= 4 and words[:2] == ["delete", "table"]:
                    self.tables.pop((words[2], words[3]), None)
        return ""

    def _sysctl(self, args: list[str], where: str) -> str:
        if "-w" in args:
            for a in args:
                if "=" in a:
                    key, value = a.split("=", 1)
                    self.sysctl[(where, key)] = value
            return ""
        keys = [a for a in args if not a.startswith("-")]
        return "".join(self._read(where, k) + "\n" for k in keys)

    def _read(self, where: str, key: str) -> str:
        if (where, key) in self.sysctl:
            return self.sysctl[(where, key)]
        if key == AVAILABLE_CC:
            have = (list(self.kernel.congestion_controls) if self.kernel is not None
                    else self._host(key).split())
            return " ".join([*have, *(c for c in self.loaded if c not in have)])
        if key == SCHEDULER_SYSCTL:
            if self.kernel is None:  # unknown kernel: take any scheduler as settable
                return self._host(key) or "default"
            return self.kernel.mptcp_scheduler or ""
        if key == AVAILABLE_SCHEDULERS:
            return "" if self.kernel is None else " ".join(self.kernel.mptcp_schedulers or ())
        return self._host(key)

    @staticmethod
    def _host(key: str) -> str:
        try:  # this machine's value (a file read; the key is a spec-checked sysctl name)
            return (Path("/proc/sys") / key.replace(".", "/")).read_text().strip()
        except OSError:
            return ""


def dry_run_commands(run: RunPlan, run_dir: Path, keep: bool = True,
                     kernel: KernelFacts | None = None) -> CommandRunner:
    """The commands the run would execute, recorded by executing its real code path.

    run: the run; run_dir: where its bundle would be (paths in the commands name it);
    keep: as ``testbed run`` without ``--fresh-networks`` (a network that may serve the
    next run takes a baseline of its hosts' state).  The transcript holds what the run's
    own transcript would: the final stop of a kept network, after the last run, is not
    part of it.  A custom topology is code: a dry run neither imports nor builds it (no
    commands).  kernel: the facts of the kernel the run would use (see `SystemAnswers`).
    """
    if isinstance(run.spec.topology, CustomTopology):
        return RecordingRunner()
    from testbed.plan.topology import build_topology
    from testbed.run.reuse import NetworkKeeper

    runner = RecordingRunner(SystemAnswers(list(build_topology(run.spec).switches()),
                                           kernel))
    with tempfile.TemporaryDirectory(prefix="testbed-dry-run-") as tmp:
        bundle = Bundle(Path(tmp) / run.run_id)
        bundle.create()
        meta: dict[str, object] = {}
        with NetworkKeeper(keep=keep, state_dir=Path(tmp)) as keeper:
            execute_run(run, bundle, meta, lambda _phase: None, keeper=keeper,
                        analyze=False, runner=runner)
            entries = len(runner.transcript.entries)
        runner.transcript = _moved(runner.transcript, entries, str(bundle.root),
                                   str(Path(run_dir)))
    return runner


def _moved(transcript: Transcript, count: int, old: str, new: str) -> Transcript:
    """The first count entries of transcript, every path under old named under new."""
    out = Transcript()
    for e in transcript.entries[:count]:
        out.add(TranscriptEntry(
            e.t_wall, [a.replace(old, new) for a in e.argv], e.where, e.returncode,
            e.duration, kind=e.kind, stderr_tail=e.stderr_tail,
            input=None if e.input is None else e.input.replace(old, new), at=e.at))
    return out
