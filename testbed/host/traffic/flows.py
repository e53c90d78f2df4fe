"""Run flows with the flow tool inside Mininet hosts and collect one record per flow.

A run hands all its `FlowSpec` s (from `testbed.plan.patterns`, addresses filled in by
`testbed.plan.flows.resolve_flows`) to one `FlowRun`::

    flows = resolve_flows(flows, addr_of={"server": "10.0.100.1"},
                          via_addr={("client", "wifi"): "10.0.1.1"})
    fr = FlowRun(runner, hosts={"client": c, "server": s}, flows=flows,
                 samples_dir=run / "samples", logs_dir=run / "logs")
    fr.launch()               # servers/sinks and clients started, then waited for
                              # (or fr.spawn(), other set-up, fr.wait_ready(); or
                              # fr.spawn(listen_later=True) before the hosts are
                              # configured, then fr.listen(), fr.wait_ready())
    fr.release(t0)            # ... which start their flows at t0 + start (start = both)
    fr.wait(timeout=60)       # True when every client has finished
    fr.stop()                 # SIGTERM: unfinished flows are recorded as interrupted
    records = fr.collect()    # -> samples/flows.jsonl, one record per flow, always

One server per (destination host, protocol) -- ``tcp``/``mptcp`` flow-tool servers and
``udp`` sinks -- on consecutive ports from ``base_port``; one client process per source
host runs all of that host's flows at ``t0 + start_s``.  Servers must print
"listening" and clients "ready" (Python starts slowly in an emulated VM) before t0 is
written to a go-file (in a private temporary folder) that releases all clients at once.
Files: ``logs/flows-<src>.json`` (the flows handed to a client), ``logs/flows-<src>.jsonl``
(its records), ``logs/flowtool-<role>-<host>-<port>.jsonl`` (server/sink records: bytes
received per connection or UDP source), ``logs/flowtool-*.log`` (stdout/stderr).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from testbed.core.commands import CommandRunner, in_parallel
from testbed.core.errors import CommandTimeout, InputError, RunError
from testbed.core.process import Process
from testbed.core.recording import recording
from testbed.core.safefiles import atomic_write_text
from testbed.core.transcript import Namespaced
from testbed.plan.flowspec import FlowSpec, base_record, dump_flows, read_records

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 180.0  # Python starts slowly in an emulated (TCG) VM
STOP_TIMEOUT_S = 15.0


# The flow tool needs only the standard library and this package (on PYTHONPATH, see
# `FlowRun`): -S skips the site module and the venv's .pth files, -c skips runpy.  That
# is a fifth of its start-up CPU, which counts where a fat-tree run starts ~30 of them at
# once on two software-emulated CPUs (40 s until all were ready).
FLOWTOOL_MAIN = "from testbed.host.traffic.flowtool import main; raise SystemExit(main())"


def flowtool_argv(*args: str, python: str | None = None) -> list[str]:
    """The flow tool with ARGS as argv (``python -S -c <run flowtool's main> ARGS``)."""
    return [python or sys.executable, "-S", "-c", FLOWTOOL_MAIN, *args]


def server_argv(port: int, protocol: str, log: Path, python: str | None = None,
                listen_file: Path | None = None) -> list[str]:
    """The flow-tool server (tcp/mptcp) or UDP sink (udp) listening on port (once
    listen_file exists, if given)."""
    later = ["--listen-file", str(listen_file)] if listen_file is not None else []
    if protocol == "udp":
        return flowtool_argv("sink", "--port", str(port), "--log", str(log), *later,
                             python=python)
    return flowtool_argv("server", "--port", str(port), "--protocol", protocol, "--log",
                         str(log), *later, python=python)


def client_argv(flows_file: Path, out: Path, go_file: Path, python: str | None = None
                ) -> list[str]:
    """The flow-tool client running the flows in flows_file once go_file holds t0."""
    return flowtool_argv("client", "--flows", str(flows_file), "--go-file", str(go_file),
                         "--out", str(out), python=python)


def _wait_for_lines(procs: Sequence[tuple[Process, Path]], word: str, timeout: float) -> None:
    deadline = time.time() + timeout
    for proc, out in procs:
        while word not in (out.read_text() if out.exists() else ""):
            if not proc.running():
                raise RunError(f"flow tool died at start: {' '.join(proc.argv)} "
                               f"(see {out.with_suffix('.log')})")
            if time.time() > deadline:
                raise RunError(f"flow tool not {word.strip(chr(34))} after {timeout:g}s: "
                               f"{' '.join(proc.argv)}")
            time.sleep(0.05)


def assign_ports(flows: Sequence[FlowSpec], base_port: int = 5001
                 ) -> tuple[list[FlowSpec], dict[tuple[str, str], int]]:
    """One port per (dst host, protocol), in order of first appearance.

    Returns the flows with ``dport`` set and the servers to start: (host, protocol) -> port.
    """
    servers: dict[tuple[str, str], int] = {}
    out = []
    for f in flows:
        key = (f.dst, f.protocol)
        if key not in servers:
            servers[key] = base_port + len(servers)
        out.append(dataclasses.replace(f, dport=servers[key]))
    return out, servers


NO_COUNT = "; no byte count from the server"  # the end of the client's note (`flowclient`)


def merge_records(flows: Sequence[FlowSpec], records: Sequence[dict[str, Any]],
                  exit_codes: Mapping[str, int | None],
                  server_records: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """Exactly one record per flow: the client's, or a synthesized failure.

    exit_codes: source host -> its client's exit status (None: still running/killed);
    server_records: what the servers logged (`FlowRun.server_records`): a flow that ended
    with the run without the server's byte count (reset with data queued) takes
    ``bytes_received`` from its connection's line there (bytes the server had read).
    """
    by_id = {r.get("flow_id"): r for r in records}
    served = {(r.get("peer_addr"), r.get("peer_port"), r.get("local_port")): r
              for r in server_records if r.get("event") == "flow"}
    out = []
    for f in flows:
        rec = by_id.get(f.flow_id)
        if rec is None:
            rec = base_record(f)
            rec["error"] = (f"no record: the flow-tool client on {f.src} exited with "
                            f"{exit_codes.get(f.src)}")
        note = rec.get("note")
        srv = served.get((rec.get("src_addr"), rec.get("sport"), rec.get("dport")))
        if rec.get("bytes_received") is None and isinstance(note, str) \
                and note.endswith(NO_COUNT) and srv is not None:
            rec["bytes_received"] = srv.get("bytes")
            rec["note"] = note.removesuffix(NO_COUNT) + "; bytes_received from the server's log"
        out.append(rec)
    return sorted(out, key=lambda r: (r.get("start") or float("inf"), str(r["flow_id"])))


class FlowRun:
    """Servers, sinks and clients of one run's flows (see the module docstring).

    runner: command runner; hosts: host name -> Mininet host; flows: resolved flows
    (`resolve_flows`); samples_dir/logs_dir: the bundle's folders; base_port: first
    server port; python: interpreter for the flow tool (default: this one).
    """

    def __init__(self, runner: CommandRunner, hosts: Mapping[str, Namespaced],
                 flows: Sequence[FlowSpec], samples_dir: Path, logs_dir: Path,
                 base_port: int = 5001, python: str | None = None):
        for f in flows:
            f.check()
            for h in (f.src, f.dst):
                if h not in hosts:
                    raise InputError(f"workload {f.workload!r}: no host named {h!r}")
        ids = [f.flow_id for f in flows]
        if len(set(ids)) != len(ids):
            raise InputError("flow ids must be unique across workloads")
        self.runner = runner
        self.hosts = hosts
        self.flows, self.servers = assign_ports(flows, base_port)
        self.samples_dir = Path(samples_dir)
        self.logs_dir = Path(logs_dir)
        self.python = python
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        self._servers: list[tuple[Process, Path]] = []
        self._clients: dict[str, Process] = {}
        self._go_dir: Path | None = None
        self.go_file: Path | None = None
        self.stopped = False  # `stop` was called
        self.t0: float | None = None

    def _src_hosts(self) -> list[str]:
        return sorted({f.src for f in self.flows})

    def start(self, t0: float | None = None, ready_timeout: float = READY_TIMEOUT_S) -> None:
        """`launch`, then `release` on t0 (default: that moment)."""
        self.launch(ready_timeout)
        self.release(t0)

    def launch(self, ready_timeout: float = READY_TIMEOUT_S) -> None:
        """Start servers/sinks and clients and wait until all are ready; the clients then
        wait for `release`.  (`spawn` then `wait_ready`.)"""
        self.spawn()
        self.wait_ready(ready_timeout)

    def spawn(self, listen_later: bool = False) -> None:
        """Start servers/sinks and clients without waiting for them: a caller can do other
        set-up while Python starts (seconds under software emulation), then `wait_ready`.
        A client does nothing on the network before `release`.

        listen_later: the servers and sinks open their sockets only at `listen` (a
        listening socket takes its host's settings when it is opened), so they can be
        started before the hosts are configured.

        The go-file that releases them lives in a private folder of the local file system
        (not the bundle, which may sit on a VM's 9p share: each client polls it every
        10 ms), and so does the listen-file."""
        self.samples_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self._go_dir = Path(tempfile.mkdtemp(prefix="testbed-go-"))  # 0700, root's
        self.go_file = self._go_dir / "go"
        if not listen_later:
            self.listen()
        for (host, proto), port in self.servers.items():
            role = "sink" if proto == "udp" else "server"
            stem = f"flowtool-{role}-{host}-{port}"
            out = self.logs_dir / f"{stem}.out"
            argv = server_argv(port, proto, self.logs_dir / f"{stem}.jsonl", self.python,
                               listen_file=self._go_dir / "listen")
            proc = self.runner.spawn(argv, host=self.hosts[host], stdout=out,
                                     log=self.logs_dir / f"{stem}.log", env=self.env)
            self._servers.append((proc, out))
        for src in self._src_hosts():
            mine = [f for f in self.flows if f.src == src]
            spec = self.logs_dir / f"flows-{src}.json"
            spec.write_text(dump_flows(mine))
            out = self.logs_dir / f"flows-{src}.jsonl"
            ready = self.logs_dir / f"flowtool-client-{src}.out"
            self._clients[src] = self.runner.spawn(
                client_argv(spec, out, self.go_file, self.python), host=self.hosts[src],
                stdout=ready, log=self.logs_dir / f"flowtool-client-{src}.log", env=self.env)

    def listen(self) -> None:
        """Let the spawned servers and sinks open their sockets (`spawn`)."""
        if self._go_dir is None:
            raise RuntimeError("FlowRun.listen before spawn")
        atomic_write_text(self._go_dir / "listen", "")

    def wait_ready(self, ready_timeout: float = READY_TIMEOUT_S) -> None:
        """Wait until every spawned server/sink listens and every client is ready
        (`RunError` if one dies or is not ready in time; nothing in a dry run)."""
        if recording(self.runner):  # a dry run: nothing runs, nothing is waited for
            return
        clients = [(proc, self.logs_dir / f"flowtool-client-{src}.out")
                   for src, proc in self._clients.items()]
        _wait_for_lines(self._servers, '"listening"', ready_timeout)
        _wait_for_lines(clients, '"ready"', ready_timeout)

    def release(self, t0: float | None = None) -> None:
        """Release the launched clients on time origin t0 (default: this moment).

        The clients' flows start at ``t0 + start_s``; if t0 is already past by then,
        flows whose start is past begin at once (their records carry the real times).
        """
        if self.go_file is None:
            raise RuntimeError("FlowRun.release before launch")
        self.t0 = time.time() if t0 is None else t0
        atomic_write_text(self.go_file, repr(self.t0) + "\n")

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for every client to finish; False if some still run after timeout."""
        deadline = None if timeout is None else time.time() + timeout
        for proc in self._clients.values():
            left = None if deadline is None else max(0.0, deadline - time.time())
            try:
                proc.wait(left)
            except CommandTimeout:
                return False
        return True

    def stop(self) -> None:
        """Stop clients (they record unfinished flows as interrupted), then servers; each
        group all at once (a Python process takes a second or two to exit under software
        emulation, and a fat-tree run has ~30 of them)."""
        self.stopped = True
        clients = list(self._clients.values())
        in_parallel(lambda p: p.stop(timeout=STOP_TIMEOUT_S), clients, workers=len(clients))
        servers = [proc for proc, _out in self._servers]
        in_parallel(lambda p: p.stop(timeout=STOP_TIMEOUT_S), servers, workers=len(servers))
        if self._go_dir is not None:
            shutil.rmtree(self._go_dir, ignore_errors=True)
            self._go_dir = None

    def collect(self) -> list[dict[str, Any]]:
        """Merge the clients' records into ``samples/flows.jsonl`` (one per flow)."""
        records: list[dict[str, Any]] = []
        for src in self._src_hosts():
            path = self.logs_dir / f"flows-{src}.jsonl"
            if path.exists():
                records += read_records(path.read_text())
        codes = {src: p.popen.poll() for src, p in self._clients.items()}
        merged = merge_records(self.flows, records, codes, self.server_records())
        with open(self.samples_dir / "flows.jsonl", "a") as f:
            for rec in merged:
                f.write(json.dumps(rec, sort_keys=True) + "\n")
        return merged

    def server_records(self) -> list[dict[str, Any]]:
        """What the servers and sinks logged (bytes received per connection/source)."""
        out = []
        for path in sorted(self.logs_dir.glob("flowtool-s*-*.jsonl")):
            out += read_records(path.read_text())
        return out
