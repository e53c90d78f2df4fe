"""One run on a cluster node: what the Ray task does there (`run_on_node`).

In order: the node checks itself (`testbed doctor`'s checks: native runs, else the
``testbed vm`` path) and, when it can do neither, reports what it lacks instead of failing
the run; it waits for the machine's emulation lock (one emulation per machine, however many
Ray nodes share it), removes what a run killed on this machine left behind, runs the plan
exactly as ``testbed run`` would here -- natively, or inside ``testbed vm`` with the
analysis done here afterwards -- into a private folder, and sends the finished bundle back
as tar bytes (`testbed.run.cluster.transfer`).  The private folder is removed afterwards.

What it returns (`NodeResult`, a plain dict so that any Ray version carries it): ``kind``
``done`` (a finished bundle, ``complete`` or ``failed``, in ``bundle``), ``node`` (the
node, not the spec, failed the run: another node may succeed; ``unfit`` when it can run
nothing at all) or ``spec`` (the spec is wrong: the sweep stops), with ``error``,
``wall_s`` (the run's own time on the node), ``node_info`` (`node_facts`) and the
bundle's ``sha256``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any, TypedDict

from testbed.core.errors import (
    InputError,
    MissingFeatureError,
    NodeError,
    TestbedError,
    UnsupportedError,
)
from testbed.results.bundle import COMPLETE, FAILED, RUNNING, bundles
from testbed.run.cluster.transfer import pack_bundle
from testbed.run.sweep import NoProgress, RunOutcome, run_one

SCRATCH_ENV = "TESTBED_CLUSTER_SCRATCH"
DEFAULT_SCRATCH = Path("/var/tmp/testbed-cluster")  # on disk; shared with `testbed vm` by
# run_in_vm(outputs=...), since the VM mounts a fresh tmpfs over /var/tmp
LOCK_NAME = "cluster-emulation.lock"
LOCK_POLL_S = 1.0  # how often a task waiting for the emulation lock looks at its node
CURRENT_NAME = "cluster-current"  # the private folder of the run holding the lock
DONE, NODE, SPEC = "done", "node", "spec"


class NodeResult(TypedDict, total=False):
    """What a node sends back for one run (see the module docstring)."""

    kind: str
    status: str
    error: str | None
    wall_s: float
    node_info: dict[str, Any]
    bundle: bytes | None
    sha256: str  # of bundle, checked by the head
    unfit: bool  # the node can run nothing (it lacks features): send it no more runs
    unsupported: bool  # its kernel lacks what the spec asks for (a congestion control...)


def failure_kind(exc: BaseException) -> str:
    """Who made a run fail: `NODE` (the machine: a missing feature or tool, too little disk,
    a kernel without the asked-for congestion control, interfaces taken, an OS error),
    `SPEC` (the user's input, the same on every node) or `DONE` (the run itself failed:
    its bundle says why, as a local sweep's would)."""
    if isinstance(exc, (NodeError, MissingFeatureError, UnsupportedError, OSError)):
        return NODE
    from testbed.run.diskspace import DiskSpaceError

    if isinstance(exc, DiskSpaceError):
        return NODE
    if isinstance(exc, InputError):
        return SPEC
    return DONE


def ray_node_id() -> str | None:
    """The Ray node id of this worker (None outside a Ray task)."""
    try:
        import ray

        if not ray.is_initialized():  # asking would start a Ray instance of its own
            return None
        return str(ray.get_runtime_context().get_node_id())
    except Exception:  # not in Ray, or an API that moved: the id is only provenance
        return None


def node_facts(mode: str) -> dict[str, Any]:
    """The node a run ran on, for its metadata's ``node`` (docs/bundle.md).

    mode: ``native`` or ``vm`` (inside ``testbed vm`` on that node)."""
    return {"executor": "ray", "hostname": platform.node(), "ray_node_id": ray_node_id(),
            "kernel": platform.release(), "mode": mode}


def node_mode() -> tuple[str | None, str]:
    """How this machine runs experiments: (``native`` | ``vm`` | None, what it lacks)."""
    if os.environ.get("TESTBED_IN_VM") == "1":
        return "native", ""
    from testbed.machine import doctor

    checks = doctor.run_checks(probe_kvm=False)
    if doctor.native_ok(checks):
        return "native", ""
    vm = [c for c in checks if c.name == "testbed vm"]
    if vm and vm[0].ok:
        return "vm", ""
    lacks = [f"{c.name} ({c.detail}; {c.remedy})" if c.remedy else f"{c.name} ({c.detail})"
             for c in checks if c.required and not c.ok]
    return None, ("lacks " + ", ".join(lacks) + "; and no `testbed vm` path "
                  f"({vm[0].detail if vm else 'not checked'})")


def scratch_root() -> Path:
    """Where runs on this node write before their bundle is sent (``$TESTBED_CLUSTER_SCRATCH``,
    else /var/tmp/testbed-cluster), created 0700.  /var/tmp is open to every local user,
    so the folder must be a real directory of ours that no one else can write: otherwise
    another user could have planted it and swapped a run's plan (`NodeError`)."""
    from testbed.core.statedir import private_dir

    root = Path(os.environ.get(SCRATCH_ENV) or DEFAULT_SCRATCH)
    try:
        ok = private_dir(root)
    except OSError as exc:
        raise NodeError(f"{root}: cannot make the node's scratch folder: {exc}") from None
    if not ok:
        raise NodeError(f"{root}: the node's scratch folder must be a directory owned by "
                        f"this user and writable by no one else; remove it (or set "
                        f"{SCRATCH_ENV})")
    return root


@contextlib.contextmanager
def emulation_lock() -> Iterator[tuple[Path, int]]:
    """Hold this machine's emulation lock (in the testbed's state directory); yields the
    file that names the private folder of the run holding it, and the lock's file
    descriptor (a `testbed vm` boot inherits it, so the lock stays held while the VM runs
    even if this process dies).  Whatever a run that died holding the lock left (its
    network, its folder) is removed first (`recover_leftovers`)."""
    import fcntl

    from testbed.net.cleanup import state_dir

    state = state_dir()
    fd = os.open(state / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        while True:  # waiting, but not for a node that is gone (`node_gone`)
            gone = node_gone()
            if gone:
                raise NodeError(f"{gone}; its run went to another node, so it is not run "
                                "here")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(LOCK_POLL_S)
        gone = node_gone()  # the lock may have come long after the node went
        if gone:
            raise NodeError(f"{gone}; its run went to another node, so it is not run here")
        current = state / CURRENT_NAME
        recover_leftovers(current)
        yield current, fd
    finally:
        os.close(fd)


def node_gone() -> str | None:
    """Why the Ray node this task runs on is gone (None while it is there, or outside Ray).

    A task waits for the emulation lock while other runs hold it, minutes at a time.  If
    its raylet dies meanwhile (killed, or stopped after the cluster declared the node dead
    for missed heartbeats), the head sends the run to another node, but this worker
    process may live on in the lock's wait: without this check it then ran the run once
    more, in a VM of its own beside the others, after the sweep had finished.  Ray tells
    a worker its raylet's process id (``RAY_RAYLET_PID``)."""
    pid = os.environ.get("RAY_RAYLET_PID", "")
    if not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return f"this node's raylet (pid {pid}) is gone"
    except PermissionError:
        pass  # it exists, as another user's process
    return _declared_dead()


def _declared_dead() -> str | None:
    """Why the cluster counts this worker's node as dead (None: alive, or cannot tell).
    A raylet whose heartbeats came late on a busy machine is declared dead and its runs
    are sent elsewhere, while the raylet itself may live on for a while."""
    try:
        import ray

        if not ray.is_initialized():
            return None
        me = ray.get_runtime_context().get_node_id()
        for n in ray.nodes():
            if n.get("NodeID") == me:
                return None if n.get("Alive", True) else \
                    f"the cluster declared this node ({me[:8]}) dead"
    except Exception:  # no answer from the cluster: the raylet check stands
        return None
    return None


def recover_leftovers(current: Path) -> list[str]:
    """Remove the network and private folder of a run that died on this machine holding
    the emulation lock (named in current, a file only this testbed writes); returns
    the run ids whose network was cleaned up."""
    from testbed.run.recovery import recover_bundle

    if not current.is_file():
        return []
    folder = Path(current.read_text().strip())
    cleaned = []
    root = scratch_root().resolve()
    if folder.is_dir() and folder.resolve().parent == root:  # only what we made
        for b in bundles(folder / "out"):
            if b.status() == RUNNING:
                with contextlib.suppress(TestbedError, OSError):
                    recover_bundle(b)
                    cleaned.append(b.run_id)
        shutil.rmtree(folder, ignore_errors=True)
    current.unlink(missing_ok=True)
    return cleaned


def run_on_node(plan: Any, extra_meta: dict[str, Any]) -> NodeResult:
    """The Ray task: run plan on this node and send its bundle back (module docstring).

    plan: a `testbed.spec.sweep.RunPlan`; extra_meta: what the head adds to every
    metadata.json (the command line, the spec file).  Never raises for a run's failure:
    the result says what happened."""
    t0 = time.time()
    mode, lacks = node_mode()
    info = node_facts(mode or "none")
    if mode is None:
        return NodeResult(kind=NODE, error=f"node {info['hostname']} {lacks}", wall_s=0.0,
                          node_info=info, bundle=None, unfit=True)
    try:
        with emulation_lock() as (current, lock_fd):
            folder = Path(tempfile.mkdtemp(prefix="run-", dir=scratch_root()))
            current.write_text(str(folder))
            try:
                meta = {**extra_meta, "node": info}
                outcome = _run_native(plan, folder, meta) if mode == "native" \
                    else _run_in_vm(plan, folder, meta, lock_fd)
                return _result(plan, folder / "out", outcome, info)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
                current.unlink(missing_ok=True)
    except Exception as exc:  # the node's own trouble (state dir, scratch, VM boot)
        # a spec error surfaces in the run's outcome (`_result`); an InputError here is
        # the node's (its state directory, a scratch path its VM cannot share)
        error = str(exc) if isinstance(exc, TestbedError) else f"{type(exc).__name__}: {exc}"
        return NodeResult(kind=NODE, error=f"node {info['hostname']}: {error}",
                          wall_s=round(time.time() - t0, 3), node_info=info, bundle=None,
                          unsupported=isinstance(exc, UnsupportedError))


def _result(plan: Any, out: Path, outcome: RunOutcome, info: dict[str, Any]) -> NodeResult:
    """The `NodeResult` of a run that ended with outcome, its bundle in ``out/<run id>``."""
    kind = DONE if outcome.exc is None else failure_kind(outcome.exc)
    if kind != DONE or outcome.status not in (COMPLETE, FAILED):
        kind = SPEC if kind == SPEC else NODE
        return NodeResult(kind=kind, error=outcome.error if kind == SPEC
                          else f"node {info['hostname']}: {outcome.error}",
                          wall_s=outcome.wall_s, node_info=info, bundle=None,
                          unsupported=isinstance(outcome.exc, UnsupportedError))
    try:
        data = pack_bundle(out / plan.run_id)
    except TestbedError as exc:  # a link or device inside the bundle: this node's doing
        raise NodeError(str(exc)) from None
    return NodeResult(kind=DONE, status=outcome.status, error=outcome.error,
                      wall_s=outcome.wall_s, node_info=info, bundle=data,
                      sha256=hashlib.sha256(data).hexdigest())


def _run_native(plan: Any, folder: Path, meta: dict[str, Any],
                analyze: bool = True) -> RunOutcome:
    """Run plan here as ``testbed run --no-vm`` would, into ``folder/out/<run id>``."""
    from testbed.run.execute import execute_run
    from testbed.run.preflight import check_kernel_support

    check_kernel_support([plan])  # load the congestion control, as a local sweep does
    out = folder / "out"
    out.mkdir(exist_ok=True)
    return run_one(plan, out, partial(execute_run, keeper=None, analyze=analyze),
                   NoProgress(), meta)


def _run_in_vm(plan: Any, folder: Path, meta: dict[str, Any], lock_fd: int) -> RunOutcome:
    """Run plan inside ``testbed vm`` on this node (`main` there, analysis deferred), then
    its analysis here (the VM's software emulation makes it ~10x slower).  The VM holds
    the emulation lock (lock_fd) as long as it runs."""
    from testbed.machine import vm
    from testbed.run.execute import analyze_run
    from testbed.run.sweep import finish_deferred

    with open(folder / "plan.pickle", "wb") as f:
        pickle.dump((plan, {**meta, "node": {**meta["node"], "mode": "vm"}}), f)
    try:
        vm.run_in_vm([sys.executable, "-m", "testbed.run.cluster.node", str(folder)],
                     outputs=[folder], quiet=True, keep_fds=(lock_fd,))
    except InputError as exc:  # e.g. a scratch path the VM cannot share: this node's
        raise NodeError(f"testbed vm: {exc}") from None
    try:
        done = json.loads((folder / "outcome.json").read_text())
    except (OSError, ValueError) as exc:
        raise NodeError(f"the run inside `testbed vm` left no outcome ({exc})") from None
    exc: Exception | None = None
    if done.get("kind") == NODE:
        what = UnsupportedError if done.get("unsupported") else NodeError
        exc = what(done.get("error") or "failed inside `testbed vm`")
    elif done.get("kind") == SPEC:
        exc = InputError(done.get("error") or "spec error")
    elif done["status"] == COMPLETE:
        bad = finish_deferred(folder / "out", analyze_run)
        if bad:
            return RunOutcome(FAILED, bad[0][1], float(done["wall_s"]))
    return RunOutcome(done["status"], done.get("error"), float(done["wall_s"]), exc)


def main(folder: Path) -> int:
    """Inside ``testbed vm``: run the pickled plan of folder (written by this node's own
    task, `_run_in_vm`) with the analysis deferred, and write ``outcome.json``."""
    with open(folder / "plan.pickle", "rb") as f:
        plan, meta = pickle.load(f)  # our own file, written just before
    try:
        res = _run_native(plan, folder, meta, analyze=False)
        kind = DONE if res.exc is None else failure_kind(res.exc)
        done = {"kind": kind, "status": res.status, "error": res.error, "wall_s": res.wall_s,
                "unsupported": isinstance(res.exc, UnsupportedError)}
    except Exception as exc:
        done = {"kind": failure_kind(exc), "status": FAILED, "error": str(exc), "wall_s": 0,
                "unsupported": isinstance(exc, UnsupportedError)}
    (folder / "outcome.json").write_text(json.dumps(done))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
