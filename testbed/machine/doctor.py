"""Preflight: can this machine run experiments natively? (``testbed doctor [--json]``)

Each check is a small function returning a `Check` (name, ok, detail, remedy).  Checks
never raise for a missing feature: they report it.  Probes that need the kernel create
uniquely named objects (a namespace and a veth pair named after this process) and delete
exactly those again.

Native runs need: root, network namespaces and veth, the htb/tbf/netem qdiscs, the
``openvswitch`` kernel module with the OVS daemons running, MPTCP enabled, nftables,
tcpdump, iperf3, Mininet (with ``mnexec``) and os-ken.  Everything else is informational.

It also prints what the kernel offers (congestion controls, MPTCP schedulers; see
`testbed.machine.kernel`) and records it per kernel release, so that a dry run can check
a spec against this kernel later, also from the host when this ran inside ``testbed vm``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from testbed.core.commands import CommandRunner, which
from testbed.core.errors import InputError
from testbed.machine.bpf_support import coupled_problems
from testbed.machine.kernel import KernelFacts, has_module, read_kernel_facts, record_facts

OVS_CTL = Path("/usr/share/openvswitch/scripts/ovs-ctl")
INSTALL = "run `scripts/install`"


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report.

    name: what was checked; ok: passed; detail: what was found; remedy: how to fix it;
    required: whether native runs need it.
    """

    name: str
    ok: bool
    detail: str
    remedy: str = ""
    required: bool = True


@dataclass
class Probe:
    """Where checks look: a command runner and the root of /proc and /sys (for tests)."""

    runner: CommandRunner
    root: Path = Path("/")
    passive: bool = False  # create, load and start nothing (a dry run's question)

    def read(self, path: str) -> str | None:
        """Contents of a /proc or /sys file, stripped, or None if unreadable."""
        try:
            return (self.root / path.lstrip("/")).read_text().strip()
        except OSError:
            return None

    def exists(self, path: str) -> bool:
        return (self.root / path.lstrip("/")).exists()

    def module(self, name: str) -> bool:
        """Kernel module name is loaded, built in or loadable (nothing is loaded)."""
        return has_module(name, self.root)

    def ok(self, argv: list[str], timeout: float = 15) -> bool:
        return self.runner.ok(argv, timeout=timeout, record=False)

    def out(self, argv: list[str], timeout: float = 60) -> tuple[int, str]:
        try:
            res = self.runner.run(argv, timeout=timeout, check=False, record=False)
        except Exception as exc:  # missing program, timeout: report, don't crash
            return 127, str(exc)
        return res.returncode, (res.stdout + res.stderr).strip()


def _first_line(text: str) -> str:
    return text.splitlines()[0].strip() if text.strip() else ""


def check_root(p: Probe) -> Check:
    ok = os.geteuid() == 0
    return Check("root", ok, "running as root" if ok else f"running as uid {os.geteuid()}",
                 "run as root (sudo)")


def check_netns_veth(p: Probe) -> list[Check]:
    """Create a namespace and a veth pair named after this process, try the qdiscs, delete.
    A passive probe only looks: root and namespaces, the modules present or loadable."""
    if p.passive:
        netns = os.geteuid() == 0 and p.exists("/proc/self/ns/net")
        checks = [Check("network namespaces", netns, "root with namespaces" if netns else
                        "not root, or no namespaces", "run as root on a kernel with "
                        "CONFIG_NET_NS"),
                  Check("veth", p.module("veth"), "module present or loadable",
                        "load the veth module (modprobe veth)")]
        return checks + [Check(name, p.module(name), "module present or loadable",
                               f"this kernel lacks {name}: use `testbed vm -- CMD`")
                         for name in ("sch_htb", "sch_tbf", "sch_netem")]
    tag = f"tbdr{os.getpid() % 100000}"
    ns, a, b = f"{tag}ns", f"{tag}a", f"{tag}b"
    checks: list[Check] = []
    netns_ok = p.ok(["ip", "netns", "add", ns])
    if netns_ok:
        p.ok(["ip", "netns", "delete", ns])
    checks.append(Check("network namespaces", netns_ok,
                        "ip netns add works" if netns_ok else "cannot create a network namespace",
                        "run as root on a kernel with CONFIG_NET_NS"))
    veth_ok = p.ok(["ip", "link", "add", a, "type", "veth", "peer", "name", b])
    checks.append(Check("veth", veth_ok, "veth pairs work" if veth_ok else "cannot create veth",
                        "load the veth module (modprobe veth)"))
    qdiscs = {
        "sch_htb": ["htb", "default", "1"],
        "sch_tbf": ["tbf", "rate", "10mbit", "burst", "15k", "latency", "50ms"],
        "sch_netem": ["netem", "delay", "1ms", "loss", "1%"],
    }
    for name, args in qdiscs.items():
        if veth_ok:
            good = p.ok(["tc", "qdisc", "replace", "dev", a, "root", *args])
            p.ok(["tc", "qdisc", "del", "dev", a, "root"])
        else:
            good = p.exists(f"/sys/module/{name}")
        checks.append(Check(name, good, "qdisc works" if good else "qdisc not available",
                            f"this kernel lacks {name}: use `testbed vm -- CMD` "
                            "(boots a stock kernel)"))
    if veth_ok:
        p.ok(["ip", "link", "del", a])
    return checks


def check_openvswitch_module(p: Probe) -> Check:
    if p.passive:
        ok = p.module("openvswitch")
    else:
        ok = p.exists("/sys/module/openvswitch") or p.ok(["modprobe", "openvswitch"])
        ok = ok and p.exists("/sys/module/openvswitch")
    return Check("openvswitch module", ok,
                 "kernel datapath available" if ok else "kernel has no openvswitch module",
                 "use `testbed vm -- CMD` (boots a stock kernel with the module)")


def check_ovs_daemons(p: Probe, start: bool = True) -> Check:
    """OVS daemons answer; if installed but stopped (and start is true), start them."""
    if which("ovs-vsctl") is None:
        return Check("OVS daemons", False, "openvswitch-switch not installed", INSTALL)
    if p.ok(["ovs-vsctl", "--timeout=5", "show"]):
        _code, ver = p.out(["ovs-vsctl", "--version"])
        return Check("OVS daemons", True, f"running ({_first_line(ver)})")
    if p.passive and start and OVS_CTL.exists() and os.geteuid() == 0:
        return Check("OVS daemons", True, "not running; a real run starts them")
    if not start:
        return Check("OVS daemons", False, "not running (not started: no kernel datapath here)",
                     "use `testbed vm -- CMD`")
    if OVS_CTL.exists() and os.geteuid() == 0:
        p.ok(["ovs-ctl" if which("ovs-ctl") else str(OVS_CTL), "--system-id=random", "start"],
             timeout=60)
        if p.ok(["ovs-vsctl", "--timeout=5", "show"]):
            return Check("OVS daemons", True, "started them (ovs-ctl start)")
    return Check("OVS daemons", False, "ovsdb-server/ovs-vswitchd not running",
                 f"start them: {OVS_CTL} start")


def check_mptcp(p: Probe) -> list[Check]:
    enabled = p.read("/proc/sys/net/mptcp/enabled")
    ok = enabled == "1"
    out = [Check("MPTCP", ok, "net.mptcp.enabled=1" if ok else
                 ("net.mptcp.enabled=0" if enabled is not None else "kernel has no MPTCP"),
                 "sysctl -w net.mptcp.enabled=1" if enabled is not None
                 else "use `testbed vm -- CMD` (stock kernels have MPTCP)")]
    sched = p.read("/proc/sys/net/mptcp/scheduler")
    avail = p.read("/proc/sys/net/mptcp/available_schedulers")
    out.append(Check("MPTCP scheduler", sched is not None,
                     f"net.mptcp.scheduler={sched} (available: {avail or sched})"
                     if sched is not None else "net.mptcp.scheduler absent (kernel < 6.6): "
                     "only the default scheduler", required=False))
    return out


def check_congestion_controls(p: Probe) -> Check:
    avail = p.read("/proc/sys/net/ipv4/tcp_available_congestion_control")
    allowed = p.read("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
    if avail is None:
        return Check("congestion controls", False, "cannot read tcp_available_congestion_control",
                     "needs a Linux kernel with TCP", required=False)
    detail = f"available: {avail}"
    if allowed and allowed != avail:
        detail += f" (allowed to non-root: {allowed})"
    detail += "; more load on demand (modprobe tcp_bbr ...)"
    return Check("congestion controls", True, detail, required=False)


def check_coupled_cc(p: Probe) -> Check:
    """The coupled MPTCP controls (LIA, OLIA, BALIA, wVegas: the testbed's BPF programs):
    kernel release, BTF and the clang/bpftool/libbpf toolchain (`coupled_problems`)."""
    release = (p.read("/proc/sys/kernel/osrelease") or os.uname().release).strip()
    problems = coupled_problems(release, p.root)
    if problems:
        return Check("coupled MPTCP CCs", False, "; ".join(problems),
                     "run `scripts/install`; a kernel without BTF or older than 5.19: "
                     "`testbed vm`", required=False)
    return Check("coupled MPTCP CCs", True, f"lia olia balia wvegas as BPF struct_ops "
                 f"(kernel {release} with BTF; clang, bpftool, libbpf headers)",
                 required=False)


def check_nftables(p: Probe) -> Check:
    if which("nft") is None:
        return Check("nftables", False, "nft not installed", INSTALL)
    ok = p.ok(["nft", "list", "tables"])
    return Check("nftables", ok, "nft works" if ok else "nft cannot talk to the kernel",
                 "load nf_tables (modprobe nf_tables) or use `testbed vm`")


def _tool(p: Probe, name: str, argv: list[str], required: bool = True,
          pattern: str = r"\d+\.\d+(\.\d+)?") -> Check:
    if which(argv[0]) is None:
        return Check(name, False, f"{argv[0]} not installed", INSTALL, required)
    _code, out = p.out(argv)
    m = re.search(pattern, out)
    return Check(name, True, f"version {m.group(0)}" if m else "installed", required=required)


def check_tools(p: Probe) -> list[Check]:
    return [
        _tool(p, "tshark", ["tshark", "--version"], required=False),
        _tool(p, "tcpdump", ["tcpdump", "--version"]),
        _tool(p, "iperf3", ["iperf3", "--version"]),
        _tool(p, "mptcpize", ["mptcpize", "--help"], required=False, pattern=r"$^"),
        _tool(p, "mnexec", ["mnexec", "-v"]),
    ]


def check_python_modules() -> list[Check]:
    out = []
    for name, mod in (("Mininet", "mininet"), ("os-ken", "os_ken")):
        spec = importlib.util.find_spec(mod)
        if spec is None:
            out.append(Check(name, False, f"python module {mod} not importable",
                             "run `scripts/install` and use .venv/bin/testbed"))
            continue
        version = ""
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version

        try:
            version = dist_version("os-ken" if mod == "os_ken" else "mininet")
        except PackageNotFoundError:  # importable but not installed as a distribution
            version = ""
        out.append(Check(name, True, f"importable {version}".strip()))
    return out


def check_vm_path(p: Probe, probe_kvm: bool = True) -> list[Check]:
    """Whether `testbed vm` can run here, and whether KVM works with a stock kernel."""
    from testbed.machine import vm

    try:
        kernel = vm.find_kernel()
        vng = vm.find_vng()
    except Exception as exc:
        return [Check("testbed vm", False, str(exc), "scripts/install --vm", required=False)]
    checks = [Check("testbed vm", True, f"virtme-ng + {kernel.name}", required=False)]
    if probe_kvm:
        kvm = vm.kvm_works(p.runner, vng, kernel)
        checks.append(Check("KVM with stock kernel", kvm,
                            "works" if kvm else "not usable here; the VM falls back to "
                            "software emulation (slower)", required=False))
    return checks


def run_checks(probe: Probe | None = None, probe_kvm: bool = True) -> list[Check]:
    """Run every check and return them in report order."""
    p = probe or Probe(CommandRunner())
    steps: list[Callable[[], Check | list[Check]]] = [
        lambda: check_root(p),
        lambda: check_netns_veth(p),
        lambda: check_openvswitch_module(p),
        lambda: check_ovs_daemons(p, start=p.module("openvswitch") if p.passive
                                  else p.exists("/sys/module/openvswitch")),
        lambda: check_mptcp(p),
        lambda: check_congestion_controls(p),
        lambda: check_coupled_cc(p),
        lambda: check_nftables(p),
        lambda: check_tools(p),
        check_python_modules,
        lambda: check_vm_path(p, probe_kvm and os.environ.get("TESTBED_IN_VM") != "1"),
    ]
    checks: list[Check] = []
    for step in steps:
        try:
            res = step()
        except Exception as exc:  # a doctor never crashes: it reports
            res = Check(getattr(step, "__name__", "check"), False, f"check failed: {exc}")
        checks.extend(res if isinstance(res, list) else [res])
    return checks


def native_ok(checks: list[Check]) -> bool:
    """True when every required check passed."""
    return all(c.ok for c in checks if c.required)


def report_json(checks: list[Check]) -> str:
    """The ``--json`` form: {"native_ok": bool, "checks": [{name, ok, detail, ...}]}."""
    return json.dumps({"native_ok": native_ok(checks),
                       "checks": [asdict(c) for c in checks]}, indent=2)


def report_text(checks: list[Check]) -> str:
    """One line per check, with the remedy for anything missing."""
    lines = []
    for c in checks:
        mark = "ok " if c.ok else ("-- " if not c.required else "NO ")
        line = f"{mark} {c.name}: {c.detail}"
        if not c.ok and c.remedy:
            line += f"  -> {c.remedy}"
        lines.append(line)
    if native_ok(checks):
        lines.append("native runs: possible")
    else:
        missing = ", ".join(c.name for c in checks if c.required and not c.ok)
        lines.append(f"native runs: not possible (missing: {missing}); run experiments "
                     "inside the VM with `testbed vm -- CMD` (testbed run does this by itself)")
    return "\n".join(lines)


def kernel_report(facts: KernelFacts, where: Path | None = None) -> tuple[list[str], str]:
    """Record facts; return the lines that show them and where the record went (or why
    it did not: the line says so, the doctor goes on)."""
    try:
        path = record_facts(facts, where)
        saved = f"recorded in {path} (what dry runs check specs against)"
    except (OSError, InputError) as exc:
        saved = f"not recorded: {exc}"
    return [f"kernel: {line}" for line in facts.summary()] + [f"kernel: {saved}"], saved


def main(as_json: bool = False) -> int:
    """Print the report and record the kernel's facts; exit code 0 when native runs are
    possible, else 1."""
    checks = run_checks()
    facts = read_kernel_facts()
    lines, saved = kernel_report(facts)
    if as_json:
        data = json.loads(report_json(checks))
        data["kernel"] = {**facts.to_json(), "record": saved}
        print(json.dumps(data, indent=2))
    else:
        print("\n".join([report_text(checks), *lines]))
    return 0 if native_ok(checks) else 1


def can_run_natively(passive: bool = False) -> bool:
    """Quick yes/no for the runner (no KVM probe).  passive: the same checks without
    creating, loading or starting anything (a dry run's question: modules and daemons a
    real run would load or start count as there)."""
    return native_ok(run_checks(Probe(CommandRunner(), passive=passive), probe_kvm=False))
