"""What a run will do, computed from its validated spec without touching the system.

* `netplan`   -- `NetworkPlan`, the whole of it, built once by `plan_network`.
* `topology`  -- the Mininet `Topo` (pure), its hosts, addresses and capture interfaces.
* `flows`     -- the run's flows (`plan_flows`), addresses resolved.
* `flowspec`  -- `FlowSpec` (one flow) and the per-flow record schema.
* `patterns`  -- pattern builders: one-to-one, incast, random pairs, permutation, CBR.
* `pings`     -- `PingTarget`, one per ping workload.
* `transport` -- `TransportSettings` and each host's MPTCP role.
* `schedule`  -- the link schedule in time order (the spec's `ScheduleEvent`s).

Layering: `testbed.net`, `testbed.host` and `controllers` use these values; this package
imports only `testbed.spec`, `testbed.core` and `topologies` (and Mininet's `Topo`).
Nothing is imported here: the flow tool, started in every host, imports `flowspec`
alone.
"""
