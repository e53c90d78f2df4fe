"""`FlowSpec`: one flow the flow tool should run, and the record it writes back.

A flow is sent by the flow-tool *client* on host ``src`` to the flow-tool *server*
(or UDP sink) on host ``dst``.  Exactly one of ``size_bytes`` / ``duration_s`` /
neither (send until stopped) bounds a TCP/MPTCP flow; a UDP flow (``protocol="udp"``)
is constant-bit-rate at ``rate_bps`` with ``packet_size``-byte payloads.

The record (one JSON object per line in ``samples/flows.jsonl``) has the fields of
docs/architecture.md -- ``flow_id, workload, src, dst, src_addr, dst_addr, sport, dport,
protocol, size_bytes, bytes, start, end, fct_s, error`` -- plus:

* ``bytes_received``: bytes the server saw (TCP/MPTCP: reported back by the server
  before it closes; for a flow that ended with the run while data was still queued,
  which is then reset rather than drained after the run, what the server had read by
  then, from its log; UDP: null here, see the sink's log);
* ``note``: why a flow that ended normally lacks something (that reset, say);
* ``t_connected``: when ``connect()`` returned; ``duration_s``, ``rate_bps``, ``cc``,
  ``via``, ``bind_addr``;
* MPTCP only: ``mptcp_token`` (hex, as ``ss`` prints it, joins ``samples/cwnd.jsonl``),
  ``mptcp_subflows`` (extra subflows in use when sending ended) and ``mptcp_fallback``
  (the connection fell back to plain TCP);
* UDP only: ``packets``.

``start`` is taken just before the socket is created (so about the SYN), ``end`` when
the server's byte count and FIN have arrived -- i.e. after the last data was
acknowledged -- so ``fct_s = end - start`` compares with SYN -> last data ACK in a pcap.
``fct_s`` is null when the flow failed (``error`` says why).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from testbed.core.errors import InputError

PROTOCOLS = ("tcp", "mptcp", "udp")

RECORD_FIELDS = ("flow_id", "workload", "src", "dst", "src_addr", "dst_addr", "sport", "dport",
                 "protocol", "size_bytes", "bytes", "start", "end", "fct_s", "error")


@dataclass(frozen=True)
class FlowSpec:
    """One flow.

    flow_id: unique id; workload: the workload's name; src/dst: host names;
    dst_addr/dport: where to connect (filled in by `testbed.plan.flows.resolve_flows` /
    `testbed.host.traffic.flows.assign_ports`);
    protocol: tcp | mptcp | udp; size_bytes / duration_s: bound (neither: until stopped);
    start_s: start offset from the run's time origin; bind_addr: source address
    (pins a TCP flow to a path); via: that path's name (recorded only); cc: congestion
    control for this socket (``TCP_CONGESTION``); rate_bps / packet_size: UDP CBR.
    """

    flow_id: str
    workload: str
    src: str
    dst: str
    protocol: str = "tcp"
    size_bytes: int | None = None
    duration_s: float | None = None
    start_s: float = 0.0
    dst_addr: str | None = None
    dport: int | None = None
    bind_addr: str | None = None
    via: str | None = None
    cc: str | None = None
    rate_bps: int | None = None
    packet_size: int = 1000

    def check(self) -> None:
        """Raise `InputError` for an inconsistent flow."""
        where = f"flow {self.flow_id!r} (workload {self.workload!r})"
        if self.protocol not in PROTOCOLS:
            raise InputError(f"{where}: protocol {self.protocol!r}; use tcp, mptcp or udp")
        if self.size_bytes is not None and self.duration_s is not None:
            raise InputError(f"{where}: give size or duration, not both")
        if self.size_bytes is not None and self.size_bytes < 0:
            raise InputError(f"{where}: size must be >= 0")
        if self.duration_s is not None and self.duration_s <= 0:
            raise InputError(f"{where}: duration must be > 0")
        if self.start_s < 0:
            raise InputError(f"{where}: start must be >= 0")
        if self.protocol == "udp":
            if not self.rate_bps or self.rate_bps <= 0:
                raise InputError(f"{where}: a UDP flow needs a rate > 0")
            if not 1 <= self.packet_size <= 65507:
                raise InputError(f"{where}: packet_size must be 1..65507 bytes")
        if self.src == self.dst:
            raise InputError(f"{where}: src and dst are both {self.src!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FlowSpec:
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise InputError(f"flow spec: unknown keys {sorted(unknown)}")
        return cls(**d)


def dump_flows(flows: Iterable[FlowSpec]) -> str:
    """Flows as the JSON the flow-tool client reads (``--flows FILE``)."""
    return json.dumps([f.to_dict() for f in flows], indent=1) + "\n"


def load_flows(text: str) -> list[FlowSpec]:
    """Flows from `dump_flows` output."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"flow file: not JSON ({exc})") from exc
    if not isinstance(data, list):
        raise InputError("flow file: expected a JSON list of flows")
    flows = [FlowSpec.from_dict(d) for d in data]
    for f in flows:
        f.check()
    return flows


def base_record(flow: FlowSpec) -> dict[str, Any]:
    """A record with the flow's fields and nothing measured yet."""
    return {"flow_id": flow.flow_id, "workload": flow.workload, "src": flow.src,
            "dst": flow.dst, "src_addr": flow.bind_addr, "dst_addr": flow.dst_addr,
            "sport": None, "dport": flow.dport, "protocol": flow.protocol,
            "size_bytes": flow.size_bytes, "bytes": 0, "start": None, "end": None,
            "fct_s": None, "error": None, "bytes_received": None, "t_connected": None,
            "duration_s": flow.duration_s, "rate_bps": flow.rate_bps, "cc": flow.cc,
            "via": flow.via, "bind_addr": flow.bind_addr, "note": None}


def read_records(text: str) -> list[dict[str, Any]]:
    """Records from JSON-lines text (blank and torn last lines are skipped)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
