"""The flow tool: a traffic server/sink and a client that runs many timed flows.

Runs inside Mininet hosts (``mnexec -a <pid> python -m testbed.host.traffic.flowtool ...``);
it only uses sockets (no subprocesses)::

    python -m testbed.host.traffic.flowtool server --port 5001 --protocol mptcp --log srv.jsonl
    python -m testbed.host.traffic.flowtool sink   --port 5002 --log sink.jsonl      # UDP
    python -m testbed.host.traffic.flowtool client --flows flows.json --t0 1700000000.0 \\
        --out flows-client.jsonl
    python -m testbed.host.traffic.flowtool client --dst 10.0.100.1 --port 5001 --size 200KB \\
        --protocol mptcp --out -                                # one flow, ad hoc

What each emits:

* ``server``: prints ``{"event": "listening", ...}`` on stdout once it accepts
  connections (the driver waits for that line), then one JSON line per connection in
  ``--log``: ``peer_addr, peer_port, local_addr, local_port, protocol, bytes, t_accept,
  t_first, t_eof, error`` (and ``mptcp_token``/``mptcp_subflows``/``mptcp_fallback`` for
  MPTCP).  After the client's EOF it sends the byte count (8 bytes, network order)
  and closes, which is how the client learns ``bytes_received`` and its end time.
  With ``--listen-file F`` it waits until F exists before it opens its socket: a driver
  starts the server while it still configures the host (Python starts slowly in an
  emulated VM), and a listening socket takes the host's settings (MPTCP enabled, the
  default congestion control) when it is opened.
* ``sink``: prints the same ``listening`` line (``--listen-file`` as for the server); at
  exit (SIGTERM/SIGINT) one line per UDP source: ``peer_addr, peer_port, bytes, packets,
  lost, t_first, t_last, owd_ms_mean`` (one-way delay: hosts share one clock in Mininet).
* ``client``: with ``--go-file F`` it prints ``{"event": "ready"}`` and waits for F
  (which holds t0); then one record per flow (see `testbed.plan.flowspec`) appended to
  ``--out`` as each flow ends; on SIGTERM/SIGINT unfinished flows are written with
  ``error = "interrupted"`` (flows without a size or duration end normally then: their
  byte count is waited for `flowclient.RUN_END_GRACE_S`, else the connection is reset
  and ``note`` says so; `FlowRun.collect` then takes ``bytes_received`` from the server's
  log), so every flow gets a record.  A connection cut short by the run's end, at
  either end, is reset, not drained after the run.  UDP flows are CBR: ``rate_bps``
  counts UDP payload bits; each payload starts with a sequence number and send time (16
  bytes) when it fits.

This module is the command line; the server and the UDP sink are in
`testbed.host.traffic.flowserver`, the client's flows in `testbed.host.traffic.flowclient`,
what both share in `testbed.host.traffic.flowsockets`.  No third-party import anywhere
in them: the tool runs with ``python -S`` in the hosts.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from testbed.core.units import parse_duration, parse_rate, parse_size
from testbed.host.traffic.flowclient import run_flows
from testbed.host.traffic.flowserver import serve, sink
from testbed.host.traffic.flowsockets import JsonLines
from testbed.plan.flowspec import FlowSpec, load_flows


def wait_for_go(path: Path, stop: threading.Event, ready: IO[str] = sys.stdout
                ) -> float | None:
    """Print a ready line, wait for path to appear, return the t0 written in it.

    Lets a driver start every client first (Python starts slowly in an emulated VM)
    and then release them all on one time origin.  None if stopped before.
    """
    ready.write(json.dumps({"event": "ready", "role": "client", "t": time.time()}) + "\n")
    ready.flush()
    while not stop.is_set():
        try:
            text = path.read_text().strip()
        except OSError:
            text = ""
        if text:
            return float(text)
        stop.wait(0.01)
    return None


def wait_for_file(path: Path, stop: threading.Event) -> bool:
    """Wait until path exists (polled every 10 ms); False if stopped before."""
    while not stop.is_set():
        if path.exists():
            return True
        stop.wait(0.01)
    return False


def _stop_on_signals(stop: threading.Event) -> dict[int, Any]:
    """SIGTERM/SIGINT set stop; returns the previous handlers."""
    def handler(_signum: int, _frame: Any) -> None:
        stop.set()
    return {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}


def build_parser() -> argparse.ArgumentParser:
    """The flow tool's argument parser."""
    p = argparse.ArgumentParser(prog="python -m testbed.host.traffic.flowtool",
                                description="Traffic server/sink and timed-flow client.")
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("server", "sink"):
        sp = sub.add_parser(name, help="TCP/MPTCP server" if name == "server" else "UDP sink")
        sp.add_argument("--bind", default="0.0.0.0")
        sp.add_argument("--port", type=int, required=True)
        if name == "server":
            sp.add_argument("--protocol", choices=("tcp", "mptcp"), default="tcp")
        sp.add_argument("--log", default=None, help="JSON lines per connection/source")
        sp.add_argument("--listen-file", default=None,
                        help="open the socket only once this file exists")
    c = sub.add_parser("client", help="run flows (a --flows file or one flow from options)")
    c.add_argument("--flows", help="JSON list of flows (testbed.plan.flowspec.dump_flows)")
    c.add_argument("--t0", type=float, default=None, help="time origin (epoch s; default now)")
    c.add_argument("--go-file", default=None,
                   help="print a ready line, wait until this file exists, read t0 from it")
    c.add_argument("--out", default="-", help="records (JSON lines); '-' for stdout")
    c.add_argument("--timeout", type=float, default=None, help="stop all flows after this")
    c.add_argument("--dst")
    c.add_argument("--port", type=int)
    c.add_argument("--protocol", choices=("tcp", "mptcp", "udp"), default="tcp")
    c.add_argument("--size", help="e.g. 200KB")
    c.add_argument("--duration", help="e.g. 10s")
    c.add_argument("--rate", help="UDP rate, e.g. 1Mbit")
    c.add_argument("--packet-size", type=int, default=1000)
    c.add_argument("--bind", default=None, help="source address (pins the path)")
    c.add_argument("--cc", default=None)
    c.add_argument("--flow-id", default="f0")
    return p


def _single_flow(a: argparse.Namespace) -> FlowSpec:
    if not a.dst or not a.port:
        raise SystemExit("flowtool client: give --flows FILE, or --dst and --port")
    flow = FlowSpec(flow_id=a.flow_id, workload="adhoc", src="local", dst=a.dst,
                    protocol=a.protocol, dst_addr=a.dst, dport=a.port,
                    size_bytes=parse_size(a.size) if a.size else None,
                    duration_s=parse_duration(a.duration) if a.duration else None,
                    bind_addr=a.bind, cc=a.cc,
                    rate_bps=parse_rate(a.rate) if a.rate else None,
                    packet_size=a.packet_size)
    flow.check()
    return flow


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (1 if any flow failed, for the client)."""
    a = build_parser().parse_args(argv)
    stop = threading.Event()
    old = _stop_on_signals(stop)
    try:
        return _main(a, stop)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _main(a: argparse.Namespace, stop: threading.Event) -> int:
    if a.cmd in ("server", "sink"):
        if a.listen_file and not wait_for_file(Path(a.listen_file), stop):
            return 0  # stopped before it was told to listen: nothing to record
        log = JsonLines(a.log)
        try:
            if a.cmd == "server":
                serve(a.bind, a.port, a.protocol, log, stop)
            else:
                sink(a.bind, a.port, log, stop)
        finally:
            log.close()
        return 0
    flows = load_flows(Path(a.flows).read_text()) if a.flows else [_single_flow(a)]
    t0 = a.t0
    if a.go_file:
        t0 = wait_for_go(Path(a.go_file), stop)
        if t0 is None:
            return 1
    out = JsonLines(a.out)
    if a.timeout:
        timer = threading.Timer(a.timeout, stop.set)
        timer.daemon = True
        timer.start()
    try:
        records = run_flows(flows, t0 if t0 is not None else time.time(), out, stop)
    finally:
        out.close()
    return 1 if any(r["error"] for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
