"""Before anything is built: the congestion controls the specs name exist on this kernel.

`check_kernel_support` runs once before a sweep's or study's first run, so an unknown
congestion control stops it at once (exit 2, naming the spec key) rather than after
every run failed; `ensure_ccs` runs again at each run's start (a module may have been
unloaded since).
"""

from __future__ import annotations

from collections.abc import Sequence

from testbed.core.commands import CommandRunner
from testbed.spec.experiment import Experiment
from testbed.spec.sweep import RunPlan


def check_kernel_support(plans: Sequence[RunPlan], runner: CommandRunner | None = None
                         ) -> None:
    """Before the first run: every congestion control the plans name is available on
    this kernel (loaded if it is a module); raises `UnsupportedError` (exit 2) naming
    the spec key and listing what the kernel offers, before anything is built."""
    runner = runner or CommandRunner()
    seen: set[str] = set()
    for plan in plans:
        exp = plan.spec
        wanted = [("transport.cc", exp.transport.cc)] + [
            (f"workload[{i}].cc", wl.cc) for i, wl in enumerate(exp.workload)
            if getattr(wl, "cc", None)]
        for key, cc in wanted:
            if cc and cc not in seen:
                from testbed.host.transport import ensure_cc

                ensure_cc(runner, cc, key=key)
                seen.add(cc)


def ensure_ccs(runner: CommandRunner, exp: Experiment) -> None:
    """Every congestion control the spec names is available (loaded if a module)."""
    from testbed.host.transport import ensure_cc

    ensure_cc(runner, exp.transport.cc)
    for i, wl in enumerate(exp.workload):
        if getattr(wl, "cc", None):
            ensure_cc(runner, wl.cc, key=f"workload[{i}].cc")
