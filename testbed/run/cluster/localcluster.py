"""A Ray cluster of one head and N worker nodes on this machine (`LocalCluster`): for the
integration test, the benchmark, and trying ``--executor ray`` out before the lab's
machines are set up (docs/cluster.md).

Each node is one ``ray start --block`` process with ports of its own and the cluster's
private ``--temp-dir``; the head offers ``testbed: 0`` (it only gathers), each worker
``testbed: 1``.  `LocalCluster.kill_worker` kills one worker's raylet by its process id
(a node dying mid-sweep); `LocalCluster.stop` ends exactly the processes it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from testbed.core.errors import RunError

OBJECT_STORE_BYTES = 80 * 1000 * 1000  # Ray's minimum is 75 MB; bundles pass through it


def free_ports(n: int) -> list[int]:
    """n TCP ports free on this machine now."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _children(pid: int) -> list[int]:
    """Every descendant of pid (from /proc), depth first."""
    out: list[int] = []
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return out
    for k in map(int, kids):
        out += [k, *_children(k)]
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


class LocalCluster:
    """A head and workers nodes on this machine.

    temp_dir: the cluster's private folder (logs, sockets; short: a Unix socket path
    must stay under 108 bytes); workers: how many worker nodes; resource: the custom
    resource each worker offers one of; env: extra environment for the nodes.
    """

    def __init__(self, temp_dir: Path, workers: int = 2, resource: str = "testbed",
                 env: dict[str, str] | None = None):
        self.temp_dir = Path(temp_dir)
        self.workers = workers
        self.resource = resource
        # no metrics agent to wait for: under software emulation (the testbed VM) the
        # nodes would not register within Ray's start-up window
        self.env = {**os.environ, "RAY_enable_metrics_collection": "0", **(env or {})}
        self.procs: list[subprocess.Popen[bytes]] = []
        self.address = ""

    def _ray(self) -> str:
        exe = Path(sys.executable).parent / "ray"
        if not exe.exists():
            raise RunError(f"{exe}: no `ray` command (pip install '.[cluster]')")
        return str(exe)

    def _start_node(self, head: bool) -> None:
        p = free_ports(7)
        amount = 0 if head else 1
        argv = [self._ray(), "start", "--block", "--disable-usage-stats",
                "--node-ip-address", "127.0.0.1", "--num-cpus", "1" if not head else "0",
                "--resources", json.dumps({self.resource: amount}),
                "--object-store-memory", str(OBJECT_STORE_BYTES),
                "--node-manager-port", str(p[1]), "--object-manager-port", str(p[2]),
                "--dashboard-agent-listen-port", str(p[3]),
                "--dashboard-agent-grpc-port", str(p[4]),
                "--runtime-env-agent-port", str(p[5]), "--metrics-export-port", str(p[6]),
                "--min-worker-port", str(20000 + 200 * len(self.procs)),
                "--max-worker-port", str(20199 + 200 * len(self.procs))]
        if head:
            self.address = f"127.0.0.1:{p[0]}"
            argv += ["--head", "--port", str(p[0]), "--include-dashboard=false",
                     "--temp-dir", str(self.temp_dir)]
        else:
            argv += ["--address", self.address]
        log = open(self._log(len(self.procs)), "wb")  # noqa: SIM115
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                           env=self.env, start_new_session=True))
        log.close()

    def _log(self, n: int) -> Path:
        return self.temp_dir.parent / f"ray-node-{n}.log"

    def _log_tail(self, n: int, lines: int = 12) -> str:
        """The last lines of node n's ``ray start`` output (tracebacks' frames left out)."""
        try:
            text = self._log(n).read_text(errors="replace")
        except OSError:
            return ""
        kept = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(" ")]
        return "\n".join(kept[-lines:])

    def start(self, timeout: float = 600) -> LocalCluster:
        """Start the head, then the workers; return once Ray counts every worker's
        resource (RunError after timeout seconds)."""
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        self._start_node(head=True)
        self._wait(lambda res: "CPU" in res or "memory" in res, timeout)
        for n in range(1, self.workers + 1):  # one at a time: they share the session folder
            self._start_node(head=False)
            self._wait(lambda res, n=n: res.get(self.resource, 0) >= n, timeout)
        return self

    def _wait(self, ready: object, timeout: float) -> None:
        """Poll ``ray status``-like resources through a short driver until ready(res)."""
        deadline = time.time() + timeout
        code = (f"import json, ray; ray.init(address={self.address!r}, logging_level='ERROR', "
                "log_to_driver=False); print(json.dumps(ray.cluster_resources()))")
        last = ""
        while time.time() < deadline:
            for n, proc in enumerate(self.procs):
                if proc.poll() is not None:
                    raise RunError(f"Ray node {n} exited with {proc.returncode} while "
                                   f"starting:\n{self._log_tail(n)}")
            try:
                res = subprocess.run([sys.executable, "-c", code], capture_output=True,
                                     text=True, env=self.env, timeout=120)
            except subprocess.TimeoutExpired:
                continue
            last = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr
            try:
                if res.returncode == 0 and ready(json.loads(last)):  # type: ignore[operator]
                    return
            except ValueError:
                pass
            time.sleep(1)
        raise RunError(f"the Ray cluster did not come up in {timeout:g}s: {last[-300:]}")

    def raylet_pid(self, worker: int) -> int:
        """The raylet process of worker number worker (0-based)."""
        node = self.procs[1 + worker]
        for pid in _children(node.pid):
            if _comm(pid) == "raylet":
                return pid
        raise RunError(f"worker {worker}: no raylet process under pid {node.pid}")

    def busy_worker(self, task: str = "run_on_node") -> int | None:
        """The number (0-based) of a worker node now executing a task of that name (Ray
        titles such a worker process ``ray::<task>``), or None when none is."""
        for n, node in enumerate(self.procs[1:]):
            for pid in _children(node.pid):
                try:
                    title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
                except OSError:
                    continue
                if title.decode(errors="replace").startswith(f"ray::{task}"):
                    return n
        return None

    def kill_worker(self, worker: int) -> int:
        """Kill worker node number worker (0-based) as a machine dying would: its raylet
        and every other process of the node (its ``ray start``, its Ray workers and what
        they started: a run's `testbed vm`), SIGKILL, by process id; return the raylet's
        pid."""
        pid = self.raylet_pid(worker)
        node = self.procs[1 + worker]
        tree = [node.pid, *_children(node.pid)]
        for p in (pid, *[p for p in tree if p != pid]):  # the raylet first
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        return pid

    def stop(self) -> None:
        """End every process this cluster started (each node's ``ray start`` and what it
        started), by process id."""
        for proc in reversed(self.procs):
            kids = _children(proc.pid)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            for pid in kids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
