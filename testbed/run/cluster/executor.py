"""A sweep's runs on a Ray cluster (``testbed run SPEC --executor ray``): `RayExecutor`.

Every due run becomes one Ray task (`testbed.run.cluster.node.run_on_node`) that needs
the custom resource ``testbed`` (`RESOURCE`, 1 by default: one emulation per machine;
docs/cluster.md).  The head waits for the tasks as they end and installs each bundle a
node sends back into ``--out`` (`testbed.run.cluster.transfer.install_bundle`); the sweep's
bookkeeping -- run ids, resume, ``summary.parquet``, reports -- is `run_sweep`'s, as for
a local sweep.

Failures: a run that failed because of the node (its worker or the whole node died, it
lacks a feature, its interfaces were taken, its bundle arrived damaged or unreadable) is
sent again, preferably to another node offering the resource, up to ``retries`` times,
and then counts as failed without a bundle; Ray itself retries nothing, so ``retries``
counts every try.  When every node says its kernel lacks what a run's spec asks for (a
congestion control no node has: most likely a typo), the sweep stops as for a spec
error.  A node that can run nothing (it lacks features) gets no more runs of the sweep
when another node can take them.  A spec error reported by a node stops the sweep at
once.
Each run's bundle is installed once: a task's result is read once.
"""

from __future__ import annotations

import contextlib
import os
import socket
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
    # ... of which those whose kernel lacks what the run's spec asks for
    unsupported: set[str] = field(default_factory=set)


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
        self.unfit: set[str] = set()  # nodes that can run nothing (they lack features)

    def runs(self, todo: list[Any], out: Path, progress: Progress,
             extra_meta: dict[str, Any]) -> Iterator[tuple[Any, RunOutcome]]:
        if not todo:
            return
        ray = import_ray()
        started = not ray.is_initialized()
        if started:
            self._connect(ray)
        pending: dict[Any, _Attempt] = {}
        self.done_by_node = Counter()  # per sweep (a study runs several)
        try:
            self._check_resource(ray)
            # Ray retries nothing itself: a task whose worker or node died comes back as
            # an error and is sent again here, so --retries counts every kind of retry
            task = ray.remote(run_on_node).options(
                resources={RESOURCE: self.amount}, num_cpus=0, max_retries=0,
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
                    # a spec no node can run stops here, before a line says it is sent again
                    self._count_unsupported(ray, att, res)
                    outcome = self._settle(att, res, out, progress)
                    if outcome is None:  # sent again (the node failed it, or its bundle)
                        att.tries += 1
                        failed_on = res.get("node_info", {}).get("ray_node_id")
                        if failed_on:
                            att.avoid.add(failed_on)
                            if res.get("unfit"):
                                self.unfit.add(failed_on)
                        # a preferred node only when one is known to have failed it
                        # (a task whose node died says no node: Ray places it anew)
                        prefer = self._other_node(ray, att.avoid | self.unfit) \
                            if att.avoid else None
                        pending[self._submit(ray, task, att.plan, extra_meta, prefer)] = att
                        continue
                    self.current = att.plan.run_id
                    yield att.plan, outcome
        finally:
            for ref in pending:  # best effort: the task's node may be gone
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            if started:
                ray.shutdown()

    def join(self) -> None:
        """Join the cluster now and check that it offers `RESOURCE` (one line and exit 2
        when not), so that a command refuses a cluster before it makes any folder.  The
        sweeps then run on this connection; Ray ends it when the process exits."""
        ray = import_ray()
        if not ray.is_initialized():
            self._connect(ray)
        self._check_resource(ray)

    def _where(self) -> tuple[str | None, str]:
        """The address to join (``--address``, else ``RAY_ADDRESS``; None: this machine's
        cluster) and how an error line names it."""
        address = self.address or os.environ.get("RAY_ADDRESS")
        named = (f"--address {address}" if self.address else
                 f"RAY_ADDRESS={address}" if address else "no --address given, and this machine")
        return address, named

    def check_address(self) -> None:
        """Refuse in one line an address where nothing listens (`InputError`): Ray itself
        would keep trying it for minutes."""
        address, named = self._where()
        if not address or address == "auto":
            return
        host, _, port = address.removeprefix("ray://").rpartition(":")
        try:
            socket.create_connection((host or address, int(port)), timeout=10).close()
        except (OSError, ValueError) as exc:
            raise InputError(f"{named}: no Ray cluster answers there ({exc}); "
                             "give the head's HOST:PORT as `ray start --head` printed it "
                             "(docs/cluster.md)") from None

    def _connect(self, ray: Any) -> None:
        """Join the cluster, or one line saying which address did not answer."""
        self.check_address()
        try:
            ray.init(address=self.address or "auto", logging_level="ERROR",
                     log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise InputError(f"{self._where()[1]}: no Ray cluster to join ({line[:200]}); "
                             "start one with `ray start --head` (docs/cluster.md)") from None

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

        # soft, and spilled when that node is busy: a preference, never a wait for it
        return task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node_id, soft=True, _spill_on_unavailable=True)).remote(plan, extra_meta)

    @classmethod
    def _count_unsupported(cls, ray: Any, att: _Attempt, res: NodeResult) -> None:
        """Count a node whose kernel lacks what the run's spec asks for; once every node
        has said so, stop the sweep (`_nowhere`)."""
        failed_on = res.get("node_info", {}).get("ray_node_id")
        if failed_on and res.get("unsupported"):
            att.unsupported.add(failed_on)
            cls._nowhere(ray, att, res)

    @staticmethod
    def _nowhere(ray: Any, att: _Attempt, res: NodeResult) -> None:
        """Stop the sweep (`InputError`) once every live node offering `RESOURCE` has said
        that its kernel lacks what the run's spec asks for (a congestion control or
        scheduler no node has: most likely a typo in the spec)."""
        nodes = {str(n["NodeID"]) for n in ray.nodes()
                 if n.get("Alive") and n.get("Resources", {}).get(RESOURCE, 0) > 0}
        if nodes and nodes <= att.unsupported:
            raise InputError(f"{res.get('error')} (every node of the cluster, "
                             f"{len(nodes)}, says the same)")

    @staticmethod
    def _other_node(ray: Any, avoid: set[str]) -> str | None:
        """A live node offering `RESOURCE` that has not failed this run and is not unfit
        (None: any node).  Only a preference (`_submit`): when it is busy, the run goes
        to any other node with the resource free."""
        for n in ray.nodes():
            if n.get("Alive") and n.get("Resources", {}).get(RESOURCE, 0) > 0 \
                    and n.get("NodeID") not in avoid:
                return str(n["NodeID"])
        return None

    @staticmethod
    def _result(ray: Any, ref: Any) -> NodeResult:
        """The task's result; a task whose worker or node died (Ray retries nothing
        itself, see `runs`) is the node's failure."""
        try:
            return ray.get(ref)
        except Exception as exc:
            # Ray's first sentence says what happened; the rest is where to look
            line = (str(exc).strip().splitlines() or [""])[0].split(". ")[0]
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
                install_bundle(res["bundle"], out, run_id, res.get("sha256"))
            except TransferError as exc:  # the node sent no usable bundle: run it again
                error = f"node {label}: {exc}"
            except OSError as exc:  # writing into --out here failed: not the node's fault
                raise RunError(f"{run_id}: could not install its bundle into {out}: {exc}; "
                               "finished runs are kept, run the command again to resume"
                               ) from None
            else:
                self.done_by_node[label] += 1
                failed = RunError(f"{run_id}: {error}") if res.get("status") == FAILED \
                    else None
                # the run's own time on the node, as a local sweep reports it (not the
                # time it waited in the queue or for the machine's emulation lock)
                return RunOutcome(str(res.get("status")), error,
                                  float(res.get("wall_s") or 0.0), failed, node=label)
        note = getattr(progress, "note", None)
        if att.tries <= self.retries:
            if note is not None:
                note(f"{run_id}: {error}; sending it again (try {att.tries + 1} of "
                     f"{self.retries + 1})")
            return None
        return RunOutcome(FAILED, f"{error} (gave up after {att.tries} tries, "
                          f"{time.time() - att.t_start:.0f} s after it was first sent)",
                          float(res.get("wall_s") or 0.0), NodeError(str(error)), node=label,
                          bundle=False)

    def _counts(self, running: int) -> str:
        """The progress line: runs under way and finished runs per node."""
        per = ", ".join(f"{n} {c}" for n, c in sorted(self.done_by_node.items()))
        return f"{running} queued or running" + (f"; done by node: {per}" if per else "")
