"""Before anything is built: the congestion controls and the MPTCP scheduler the specs
name exist on the kernel the runs will use.

`check_kernel_support` runs once before a sweep's or study's first real run: it records
this kernel's facts (`testbed.machine.kernel`), refuses an unavailable scheduler, and
loads (``modprobe``) or refuses each congestion control, so an unknown name stops it at
once (exit 2, naming the spec key) rather than after every run failed; `ensure_ccs` runs
again at each run's start (a module may have been unloaded since).

A dry run changes nothing: `kernel_target` picks the kernel the runs would use (this
machine's, or the ``testbed vm`` kernel's record when runs would go to the VM, by the
same decision as a real run) and `check_plans` compares the specs with its facts.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from testbed.core.commands import CommandRunner
from testbed.core.errors import InputError, MissingFeatureError, UnsupportedError
from testbed.machine.kernel import KernelFacts, read_kernel_facts, record_facts
from testbed.spec.experiment import Experiment
from testbed.spec.sweep import RunPlan

HOW_TO_RECORD = "`testbed vm -- testbed doctor`"


@dataclass(frozen=True)
class Wanted:
    """One kernel feature a plan asks for: the key as the user set it, and the name."""

    key: str
    what: str  # "cc" | "scheduler"
    name: str


def wanted(plans: Sequence[RunPlan], labels: Mapping[str, str] | None = None
           ) -> list[Wanted]:
    """Every congestion control and MPTCP scheduler the plans name, once per key and name.

    labels: key path -> ``--set KEY`` for keys set on the command line
    (`testbed.spec.sweep.override_labels`); a swept key says so.
    """
    labels = labels or {}
    out: dict[tuple[str, str], Wanted] = {}

    def add(plan: RunPlan, key: str, what: str, name: str | None) -> None:
        if not name:
            return
        shown = labels.get(key, key)
        if key in plan.params:
            shown = f"sweep.\"{key}\""
        out.setdefault((shown, name), Wanted(shown, what, name))

    for plan in plans:
        exp = plan.spec
        if exp.transport.handover != "none":
            add(plan, "transport.handover", "cc", exp.transport.kernel_cc())
        else:
            add(plan, "transport.cc", "cc", exp.transport.cc)
        for i, wl in enumerate(exp.workload):
            add(plan, f"workload[{i}].cc", "cc", getattr(wl, "cc", None))
        if exp.transport.protocol == "mptcp":  # ignored for plain TCP (docs/spec.md)
            add(plan, "transport.scheduler", "scheduler", exp.transport.scheduler)
    return list(out.values())


def problems(items: Sequence[Wanted], facts: KernelFacts) -> list[str]:
    """One line for each congestion control or scheduler the kernel does not offer."""
    from testbed.machine.bpf_support import coupled_problems
    from testbed.spec.model import BPF_CCS

    lines = []
    for w in items:
        if w.what == "cc" and w.name in BPF_CCS:  # the testbed's BPF programs
            lines += [f"{w.key}: BPF congestion control {w.name!r} cannot run on kernel "
                      f"{facts.release}: {p}"
                      for p in coupled_problems(facts.release, btf=facts.btf is not False)]
            continue
        if w.what == "cc" and w.name not in facts.offered_ccs():
            lines.append(f"{w.key}: congestion control {w.name!r} is not available on "
                         f"kernel {facts.release}; it offers: {facts.cc_offer()}")
        if w.what == "scheduler":
            offered = facts.offered_schedulers()
            if offered is not None and w.name not in offered:
                lines.append(f"{w.key}: MPTCP scheduler {w.name!r} is not available on "
                             f"kernel {facts.release}; it offers: {facts.scheduler_offer()}")
    return lines


def check_plans(plans: Sequence[RunPlan], facts: KernelFacts,
                labels: Mapping[str, str] | None = None) -> None:
    """Raise `UnsupportedError` (one line per problem) when facts lack what plans name."""
    lines = problems(wanted(plans, labels), facts)
    if lines:
        raise UnsupportedError("\n".join(lines))


def record_live(facts: KernelFacts) -> None:
    """Record this kernel's facts for later dry runs; a failure is one line, not fatal."""
    try:
        record_facts(facts)
    except (OSError, InputError) as exc:
        print(f"note: kernel facts not recorded: {exc}", file=sys.stderr)


def check_kernel_support(plans: Sequence[RunPlan], runner: CommandRunner | None = None,
                         labels: Mapping[str, str] | None = None,
                         facts: KernelFacts | None = None) -> None:
    """Before the first real run: record this kernel's facts, refuse an unavailable MPTCP
    scheduler, and make every congestion control the plans name available (loaded if a
    module); raises `UnsupportedError` (exit 2) naming the spec key and what the kernel
    offers, before anything is built.

    runner: runs ``modprobe``; labels: see `wanted`; facts: this kernel's (default: read
    and recorded now).
    """
    if facts is None:
        facts = read_kernel_facts()
        record_live(facts)
    items = wanted(plans, labels)
    lines = problems([w for w in items if w.what == "scheduler"], facts)
    if lines:
        raise UnsupportedError("\n".join(lines))
    from testbed.host.transport import ensure_cc

    runner = runner or CommandRunner()
    seen: set[str] = set()
    for w in items:
        if w.what == "cc" and w.name not in seen:
            ensure_cc(runner, w.name, key=w.key)
            seen.add(w.name)


def bpf_ccs(exp: Experiment) -> list[str]:
    """The testbed's own BPF congestion controls the spec uses (coupled MPTCP controls,
    hand-over schemes): the programs the run registers."""
    from testbed.spec.model import BPF_CCS

    names = {exp.transport.kernel_cc()} | {getattr(wl, "cc", None) for wl in exp.workload}
    return sorted(n for n in names if n in BPF_CCS)


def ensure_ccs(runner: CommandRunner, exp: Experiment) -> None:
    """Every congestion control the spec names is available (loaded if a module)."""
    from testbed.host.transport import ensure_cc

    ensure_cc(runner, exp.transport.kernel_cc(),
              key="transport.handover" if exp.transport.handover != "none" else "transport.cc")
    for i, wl in enumerate(exp.workload):
        if getattr(wl, "cc", None):
            ensure_cc(runner, wl.cc, key=f"workload[{i}].cc")


@dataclass(frozen=True)
class KernelTarget:
    """The kernel a dry run checks against: its facts (None: could not check) and one
    line saying which kernel or record it is, or why there is none."""

    facts: KernelFacts | None
    line: str


def kernel_target(in_vm: bool, live: Callable[[], KernelFacts] | None = None,
                  vm_release: Callable[[], str] | None = None,
                  load: Callable[[str], KernelFacts | None] | None = None) -> KernelTarget:
    """The kernel the runs would use, for a dry run (nothing is loaded or written).

    in_vm: the runs would go to ``testbed vm`` (the real run's decision); live: reads
    this machine's kernel (default `read_kernel_facts`); vm_release: the VM kernel's
    release (default: the image ``testbed vm`` boots); load: that release's record
    (default `testbed.machine.kernel.load_record`).
    """
    if not in_vm:
        facts = (live or read_kernel_facts)()
        return KernelTarget(facts, f"kernel check: this machine's kernel {facts.release} "
                                   "(the runs would execute here)")
    from testbed.machine.kernel import load_record, record_path, records_dir

    if vm_release is None:
        from testbed.machine.vm import kernel_release as vm_release
    try:
        release = vm_release()
    except (InputError, MissingFeatureError) as exc:
        return KernelTarget(None, f"kernel check: not done: the runs would go to `testbed "
                                  f"vm`, which has no kernel here ({exc})")
    facts = (load or load_record)(release)
    if facts is None:
        return KernelTarget(None, f"kernel check: not done: no record of the VM kernel "
                                  f"{release} in {records_dir()}; record it with "
                                  f"{HOW_TO_RECORD}")
    when = f" {facts.recorded}" if facts.recorded else ""
    return KernelTarget(facts, f"kernel check: the VM kernel {release}, recorded{when} in "
                               f"{record_path(release)} (the runs would go to `testbed vm`)")


def check_before_vm(plans: Sequence[RunPlan], labels: Mapping[str, str] | None = None,
                    target: KernelTarget | None = None) -> None:
    """Before runs are handed to ``testbed vm``: raise `UnsupportedError` when the VM
    kernel's record (`kernel_target`) lacks a congestion control or scheduler the plans
    name, so that a typo such as ``--set transport.cc=cubc`` is refused here at once, not
    after a boot of a minute or more under software emulation.  Without a record nothing
    is checked here: the run inside the VM checks its live kernel as always."""
    target = target or kernel_target(in_vm=True)
    if target.facts is not None:
        check_plans(plans, target.facts, labels)


def check_networks(plans: Sequence[RunPlan], source: str = "",
                   labels: Mapping[str, str] | None = None) -> None:
    """Plan every distinct sweep point's network (`testbed.plan.netplan.plan_network`)
    before anything runs, so that a point naming a link, interface or host its topology
    lacks is refused at once rather than when its run comes (after the runs before it).

    plans: the runs of one spec (repetitions of a point share its spec: planned once; a
    custom topology's runs are left out, as a dry run never imports its module);
    source: the spec file, named in the message; labels: key path -> ``--set KEY`` for
    keys set on the command line (`testbed.spec.sweep.override_labels`), named instead of
    the file.  Raises `SpecError` naming the file (or ``--set KEY``), the key and the
    swept values of the first point that cannot be planned.
    """
    from testbed.core.errors import SpecError
    from testbed.plan.netplan import plan_network
    from testbed.spec.model import CustomTopology
    from testbed.spec.sweep import point_text

    seen: set[str] = set()
    for plan in plans:
        if isinstance(plan.spec.topology, CustomTopology):
            continue  # code: imported only by the real run that builds it (docs/security.md)
        key = plan.spec.model_dump_json()
        if key in seen:
            continue
        seen.add(key)
        try:
            plan_network(plan)
        except InputError as exc:
            where = point_text(plan.params)
            lines = [_named(line, source, labels or {}) for line in str(exc).splitlines()]
            if where:
                lines = [f"{line} (in the sweep point {where})" for line in lines]
            raise SpecError("\n".join(lines)) from None


def _named(line: str, source: str, labels: Mapping[str, str]) -> str:
    """A problem line prefixed with what the user wrote it in: ``--set KEY`` when its key
    (or a key above it) came from the command line, else the spec file."""
    key, sep, rest = line.partition(": ")
    for shown, label in labels.items():
        if sep and (key == shown or key.startswith((f"{shown}.", f"{shown}["))):
            return f"{label}: {rest}" if key == shown else f"{label}: {key}: {rest}"
    return f"{source}: {line}" if source and not line.startswith(source) else line
