"""A sweep's runs on a Ray cluster (``testbed run SPEC --executor ray``): `RayExecutor`.

Every due run becomes one Ray task (`testbed.run.cluster.node.run_on_node`) that needs
the custom resource ``testbed`` (`RESOURCE`, 1 by default: one emulation per machine;
docs/cluster.md).  The head waits for the tasks as they end and installs each bundle a
node sends back into ``--out`` (`testbed.run.cluster.transfer.install_bundle`); the sweep's
bookkeeping -- run ids, resume, ``summary.parquet``, reports -- is `run_sweep`'s, as for
a local sweep.

Failures: a worker or node that dies mid-run is retried by Ray itself (``max_retries``,
system failures only); a run that failed because of the node (it lacks a feature, its
interfaces were taken, its bundle arrived damaged, or Ray gave up on it) is sent again,
to another node when one offers the resource, up to ``retries`` times, and then counts
as failed without a bundle.  A spec error reported by a node stops the sweep at once.
Each run's bundle is installed once: a task's result is read once.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.core.errors import InputError, MissingFeatureError, NodeError, RunError
from testbed.results.bundle import FAILED
from testbed.run.cluster.node import DONE, SPEC, NodeResult, run_on_node
from testbed.run.cluster.transfer import TransferError, install_bundle
from testbed.run.sweep import Executor, Progress, RunOutcome

RESOURCE = "testbed"
RAY_HINT = ("`--executor ray` needs Ray: pip install '.[cluster]' in the testbed's "
            "checkout (or `scripts/install --cluster`)")


def import_ray() -> Any:
    """The ``ray`` module, or `MissingFeatureError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise MissingFeatureError(RAY_HINT) from None
    return ray


def node_label(info: dict[str, Any] | None) -> str:
    """``host/1a2b3c4d``: a node's hostname and the start of its Ray node id."""
    info = info or {}
    nid = str(info.get("ray_node_id") or "")[:8]
    return f"{info.get('hostname', '?')}/{nid}" if nid else str(info.get("hostname", "?"))


@dataclass
class _Attempt:
    plan: Any
    tries: int = 1
    t_start: float = field(default_factory=time.time)
    avoid: set[str] = field(default_factory=set)  # node ids that failed this run


class RayExecutor(Executor):
    """Runs a sweep's plans as Ray tasks and installs the bundles they send back.

    address: the cluster (``ray start --head`` printed it; None: ``RAY_ADDRESS`` or the
    cluster started on this machine); retries: how often a run the node failed is sent
    again; amount: how much of `RESOURCE` a run takes; poll_s: how often the progress
    line is refreshed.
    """

    def __init__(self, address: str | None = None, retries: int = 2, amount: float = 1.0,
                 poll_s: float = 1.0):
        self.address = address
        self.retries = retries
        self.amount = amount
        self.poll_s = poll_s
        self.done_by_node: Counter[str] = Counter()

    def runs(self, todo: list[Any], out: Path, progress: Progress,
             extra_meta: dict[str, Any]) -> Iterator[tuple[Any, RunOutcome]]:
        if not todo:
            return
        ray = import_ray()
        started = not ray.is_initialized()
        if started:
            ray.init(address=self.address or "auto", logging_level="ERROR",
                     log_to_driver=False, configure_logging=False)
        pending: dict[Any, _Attempt] = {}
        try:
            self._check_resource(ray)
            task = ray.remote(run_on_node).options(
                resources={RESOURCE: self.amount}, num_cpus=0, max_retries=self.retries,
                retry_exceptions=False)
            progress.begin(0, f"{len(todo)} run(s) on the Ray cluster")
            for plan in todo:
                pending[self._submit(ray, task, plan, extra_meta)] = _Attempt(plan)
            shown = ""
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=self.poll_s)
                line = self._counts(len(pending))
                if line != shown:  # plain output: a line per change, not per poll
                    progress.phase(line)
                    shown = line
                for ref in ready:
                    att = pending.pop(ref)
                    res = self._result(ray, ref)
                    outcome = self._settle(att, res, out, progress)
                    if outcome is None:  # sent again
                        att.tries += 1
                        if res.get("node_info", {}).get("ray_node_id"):
                            att.avoid.add(res["node_info"]["ray_node_id"])
                        pending[self._submit(ray, task, att.plan, extra_meta,
                                             self._other_node(ray, att.avoid))] = att
                        continue
                    self.current = att.plan.run_id
                    yield att.plan, outcome
        finally:
            for ref in pending:  # best effort: the task's node may be gone
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            if started:
                ray.shutdown()

    def _check_resource(self, ray: Any) -> None:
        total = ray.cluster_resources().get(RESOURCE, 0)
        if total < self.amount:
            raise MissingFeatureError(
                f"no node of the Ray cluster offers the `{RESOURCE}` resource (have "
                f"{total:g}); start each worker with `ray start --address HEAD:6379 "
                f"--resources '{{\"{RESOURCE}\": 1}}'` (docs/cluster.md)")

    @staticmethod
    def _submit(ray: Any, task: Any, plan: Any, extra_meta: dict[str, Any],
                node_id: str | None = None) -> Any:
        if node_id is None:
            return task.remote(plan, extra_meta)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node_id, soft=True)).remote(plan, extra_meta)

    @staticmethod
    def _other_node(ray: Any, avoid: set[str]) -> str | None:
        """A live node offering `RESOURCE` that has not failed this run (None: any)."""
        for n in ray.nodes():
            if n.get("Alive") and n.get("Resources", {}).get(RESOURCE, 0) > 0 \
                    and n.get("NodeID") not in avoid:
                return str(n["NodeID"])
        return None

    @staticmethod
    def _result(ray: Any, ref: Any) -> NodeResult:
        """The task's result; a task Ray gave up on (its worker or node died, after Ray's
        own retries) is the node's failure."""
        try:
            return ray.get(ref)
        except Exception as exc:
            line = (str(exc).strip().splitlines() or [""])[0]
            return NodeResult(kind="node", error=f"{type(exc).__name__}: {line}",
                              wall_s=0.0, node_info={}, bundle=None)

    def _settle(self, att: _Attempt, res: NodeResult, out: Path,
                progress: Progress) -> RunOutcome | None:
        """Install a finished run's bundle and say how it ended; None when the run is to be
        sent again (the node failed it and retries remain)."""
        run_id, label = att.plan.run_id, node_label(res.get("node_info"))
        if res.get("kind") == SPEC:
            raise InputError(str(res.get("error")))
        error = res.get("error")
        if res.get("kind") == DONE and res.get("bundle") is not None:
            try:
                install_bundle(res["bundle"], out, run_id)
                self.done_by_node[label] += 1
                failed = RunError(f"{run_id}: {error}") if res.get("status") == FAILED \
                    else None
                # the run's own time on the node, as a local sweep reports it (not the
                # time it waited in the queue or for the machine's emulation lock)
                return RunOutcome(str(res.get("status")), error,
                                  float(res.get("wall_s") or 0.0), failed, node=label)
            except (TransferError, OSError) as exc:
                error = f"node {label}: {exc}"
        note = getattr(progress, "note", None)
        if att.tries <= self.retries:
            if note is not None:
                note(f"{run_id}: {error}; sending it again (try {att.tries + 1} of "
                     f"{self.retries + 1})")
            return None
        return RunOutcome(FAILED, f"{error} (gave up after {att.tries} tries)",
                          time.time() - att.t_start, NodeError(str(error)), node=label)

    def _counts(self, running: int) -> str:
        """The progress line: runs under way and finished runs per node."""
        per = ", ".join(f"{n} {c}" for n, c in sorted(self.done_by_node.items()))
        return f"{running} queued or running" + (f"; done by node: {per}" if per else "")
