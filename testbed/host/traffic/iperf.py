"""iperf3 bulk transfers, the alternative to the flow tool for greedy TCP/MPTCP flows.

iperf3 3.12 has no ``--mptcp``; MPTCP runs it under ``mptcpize run`` (an LD_PRELOAD
that turns its TCP sockets into MPTCP ones) on *both* ends -- a plain iperf3 server
makes the client fall back to TCP.  A one-off server (``-s -1``) per transfer::

    ir = IperfRun(runner, client, server, "10.0.100.1", samples_dir, logs_dir,
                  name="bulk0", protocol="mptcp", duration=10, cc="reno")
    ir.start(); ir.wait(30); rec = ir.collect()    # one flows.jsonl record

Emits ``samples/iperf3-<name>.json`` (the client's ``-J`` report) and appends one
record to ``samples/flows.jsonl`` (fields of `testbed.plan.flowspec`; ``start``/
``end`` are the client's wall-clock start and start + test seconds, so ``fct_s`` is
iperf3's own test length -- use the flow tool when FCT precision matters), plus
``retransmits`` and ``goodput_bps`` (receiver bytes / receiver seconds).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from testbed.core.commands import CommandRunner
from testbed.core.errors import CommandTimeout, InputError, RunError
from testbed.core.process import Process
from testbed.core.transcript import Namespaced


def mptcp_prefix(protocol: str) -> list[str]:
    """``["mptcpize", "run"]`` for MPTCP, else nothing."""
    return ["mptcpize", "run"] if protocol == "mptcp" else []


def iperf3_server_argv(port: int, protocol: str = "tcp", bind: str | None = None
                       ) -> list[str]:
    """One-off iperf3 server (``-s -1``) on port."""
    argv = [*mptcp_prefix(protocol), "iperf3", "-s", "-1", "-p", str(port)]
    return argv + (["-B", bind] if bind else [])


def iperf3_client_argv(dst_addr: str, port: int, *, protocol: str = "tcp",
                       size: int | None = None, duration: float | None = None,
                       parallel: int = 1, cc: str | None = None, bind: str | None = None
                       ) -> list[str]:
    """iperf3 client with a JSON report (``-J``).

    size: bytes (``-n``) or duration: seconds (``-t``, default 10); parallel: streams
    (``-P``); cc: ``-C``; bind: source address (``-B``, pins a TCP flow to a path).
    """
    if size is not None and duration is not None:
        raise InputError("iperf3: give size or duration, not both")
    argv = [*mptcp_prefix(protocol), "iperf3", "-c", dst_addr, "-p", str(port), "-J"]
    if size is not None:
        argv += ["-n", str(size)]
    else:
        argv += ["-t", f"{duration if duration is not None else 10:g}"]
    if parallel > 1:
        argv += ["-P", str(parallel)]
    if cc:
        argv += ["-C", cc]
    if bind:
        argv += ["-B", bind]
    return argv


def parse_iperf3_json(text: str) -> dict[str, Any]:
    """The totals of an iperf3 ``-J`` client report (pure).

    Returns bytes_sent, bytes_received, seconds (receiver side), goodput_bps,
    retransmits, start_epoch (whole seconds, from iperf3), cc (sender), error.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return {"error": f"iperf3 output is not JSON: {exc}"}
    end = data.get("end", {}) or {}
    sent = end.get("sum_sent", {}) or {}
    recv = end.get("sum_received", {}) or {}
    secs = recv.get("seconds") or sent.get("seconds")
    rbytes = recv.get("bytes")
    start = data.get("start", {}) or {}
    conn = (start.get("connected") or [{}])[0]
    return {"bytes_sent": sent.get("bytes"), "bytes_received": rbytes, "seconds": secs,
            "goodput_bps": (rbytes * 8 / secs) if rbytes and secs else None,
            "retransmits": sent.get("retransmits"),
            "start_epoch": (start.get("timestamp") or {}).get("timesecs"),
            "cc": end.get("sender_tcp_congestion"),
            "local_host": conn.get("local_host"), "local_port": conn.get("local_port"),
            "error": data.get("error")}


class IperfRun:
    """One iperf3 transfer: a one-off server on dst, a client on src.

    runner: command runner; src_host/dst_host: Mininet hosts; dst_addr: server address;
    samples_dir/logs_dir: bundle folders; name: workload name (file stem and flow id
    ``<name>-0``); port: server port; the rest as for `iperf3_client_argv`.
    """

    def __init__(self, runner: CommandRunner, src_host: Namespaced, dst_host: Namespaced,
                 dst_addr: str, samples_dir: Path, logs_dir: Path, *, name: str = "iperf3",
                 port: int = 5201, protocol: str = "tcp", size: int | None = None,
                 duration: float | None = None, parallel: int = 1, cc: str | None = None,
                 bind: str | None = None, via: str | None = None):
        self.runner, self.src, self.dst = runner, src_host, dst_host
        self.samples_dir, self.logs_dir = Path(samples_dir), Path(logs_dir)
        self.name, self.port, self.protocol = name, port, protocol
        self.size, self.duration, self.cc, self.via, self.bind = size, duration, cc, via, bind
        self.dst_addr = dst_addr
        self.server_argv = iperf3_server_argv(port, protocol)
        self.client_argv = iperf3_client_argv(dst_addr, port, protocol=protocol, size=size,
                                              duration=duration, parallel=parallel, cc=cc,
                                              bind=bind)
        self.report = self.samples_dir / f"iperf3-{name}.json"
        self._server: Process | None = None
        self._client: Process | None = None
        self.t_start: float | None = None

    def start(self, ready_timeout: float = 180.0) -> None:
        """Start the server, wait until it listens (``ss -ltn``), then the client."""
        self.samples_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self._server = self.runner.spawn(self.server_argv, host=self.dst,
                                         log=self.logs_dir / f"iperf3-{self.name}-server.log")
        deadline = time.time() + ready_timeout
        while f":{self.port} " not in self.runner.run(
                ["ss", "-Hltn", "sport", "=", f":{self.port}"], host=self.dst,
                record=False, check=False).stdout + " ":
            if not self._server.running() or time.time() > deadline:
                raise RunError(f"iperf3 server on {self.dst.name}:{self.port} did not start "
                               f"(see logs/iperf3-{self.name}-server.log)")
            time.sleep(0.1)
        self.t_start = time.time()
        self._client = self.runner.spawn(self.client_argv, host=self.src, stdout=self.report,
                                         log=self.logs_dir / f"iperf3-{self.name}-client.log")

    def wait(self, timeout: float | None = None) -> bool:
        """True once the client has exited."""
        if self._client is None:
            return True
        try:
            self._client.wait(timeout)
        except CommandTimeout:
            return False
        return True

    def stop(self) -> None:
        """Stop client and server (SIGTERM; iperf3 still writes its report)."""
        for p in (self._client, self._server):
            if p is not None:
                p.stop()

    def collect(self) -> dict[str, Any]:
        """Parse the report; append one record to ``samples/flows.jsonl``; return it."""
        text = self.report.read_text() if self.report.exists() else ""
        res = parse_iperf3_json(text) if text.strip() else {"error": "no iperf3 report"}
        start = self.t_start
        secs = res.get("seconds")
        end = (start + secs) if (start is not None and secs) else None
        rec = {"flow_id": f"{self.name}-0", "workload": self.name, "src": self.src.name,
               "dst": self.dst.name, "src_addr": res.get("local_host"),
               "dst_addr": self.dst_addr, "sport": res.get("local_port"), "dport": self.port,
               "protocol": self.protocol, "size_bytes": self.size,
               "bytes": res.get("bytes_sent") or 0, "bytes_received": res.get("bytes_received"),
               "start": start, "end": end, "fct_s": secs if not res.get("error") else None,
               "error": res.get("error"), "duration_s": self.duration, "cc": res.get("cc"),
               "via": self.via, "bind_addr": self.bind, "retransmits": res.get("retransmits"),
               "goodput_bps": res.get("goodput_bps"), "tool": "iperf3"}
        with open(self.samples_dir / "flows.jsonl", "a") as f:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
        return rec
