"""Workload generators (what each emits is described in its module docstring).

What they run comes from `testbed.plan`: `testbed.plan.flowspec` (`FlowSpec`, one flow,
and the per-flow record schema) and `testbed.plan.patterns` (the pattern builders).

* `flowtool`  -- the flow tool itself (server / UDP sink / client), run inside hosts as
  ``python -m testbed.host.traffic.flowtool``; only sockets.  Its parts: `flowserver`
  (server and UDP sink), `flowclient` (timed flows), `flowsockets` (what both share).
* `flows`     -- `FlowRun`: starts servers and clients in hosts, collects
  ``samples/flows.jsonl`` (one record per flow, always).
* `iperf`     -- `IperfRun`: iperf3 bulk transfer (``mptcpize run`` for MPTCP).
* `ping`      -- `PingRun`, ``parse_ping`` and the P2 summary table.
"""
