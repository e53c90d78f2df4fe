"""One network for consecutive runs that need the same one (`NetworkKeeper`).

Building the k=4 fat-tree takes about three minutes in the CI's software-emulated VM and
tearing it down one more, while a study's fat-tree runs differ only in the controller and
the workload.  A `NetworkKeeper` hands a run the network the previous run used when both
have the same `reuse_key`, and builds a fresh one otherwise.

Between two runs on one network (`Network.end_run`, `Network.begin_run`): every process
the first run started in the hosts is ended; its controller is stopped and its nftables
tables deleted; the next run's controller is started and waited for until it has wiped
and re-programmed every switch; links a schedule changed get their configured shape and
state back; each host's TCP metrics cache is flushed.  What stays: hosts, links, qdiscs,
bridges, ARP caches, and the counters of qdiscs and ports (the ``tc -s`` dumps in a
bundle count from the network's start; ``metadata.json`` says so under ``network``).

Reuse is offered only where it cannot change a result: the same topology and transport
sections (so every sysctl a run writes is written again with the same value), TCP (an
MPTCP run leaves path-manager endpoints and limits behind) and no link schedule.  A run
that fails gets no successor on its network: the keeper stops it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testbed.commands import CommandRunner


def reuse_key(exp: Any) -> str | None:
    """The text two runs share exactly when one may use the other's network; None when
    the run needs a network of its own (MPTCP, a link schedule)."""
    from testbed.runner import uses_mptcp

    if exp.transport.protocol != "tcp" or uses_mptcp(exp) or exp.schedule:
        return None
    data = exp.model_dump(mode="json", include={"topology", "transport"})
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


class NetworkKeeper:
    """Hands runs a started `Network`, keeping it between runs with the same `reuse_key`.

    keep: False makes every run build and stop its own network (``--fresh-networks``).
    Call `close` when the runs are over (a `with` block does): it stops a kept network.
    """

    def __init__(self, keep: bool = True):
        self.keep = keep
        self.net: Any = None
        self.key: str | None = None
        self.built_by: str | None = None
        self.runs = 0  # runs the kept network has served

    def __enter__(self) -> NetworkKeeper:
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()

    def acquire(self, exp: Any, topo: Any, run_id: str, runner: CommandRunner,
                controller: Any, workdir: Path) -> tuple[Any, dict[str, Any]]:
        """A started network for this run, and what ``metadata.json`` says about it.

        exp: the run's `Experiment`; topo: its Mininet topology; run_id: the run's id;
        runner, controller, workdir: as for `Network`.  A kept network with another key
        is stopped first.  Raises what `Network.start` / `Network.begin_run` raise.
        """
        from testbed.network import Network

        key = reuse_key(exp) if self.keep else None
        if self.net is not None and key is not None and key == self.key:
            net = self.net
            self.net = None  # owned by the run until `release`
            try:
                net.begin_run(runner, controller, workdir)
            except BaseException:
                net.stop()
                raise
            self.runs += 1
            return net, {"reused": True, "built_by": self.built_by,
                         "runs_before": self.runs - 1,
                         "counters": "qdisc and port counters count from the network's "
                                     "start"}
        self.close()
        net = Network(topo, runner=runner, controller=controller, workdir=workdir)
        net.start()
        self.key, self.built_by, self.runs = key, run_id, 1
        return net, {"reused": False, "built_by": run_id, "runs_before": 0}

    def release(self, net: Any, ok: bool) -> dict[str, Any]:
        """The run is over: keep net for the next run (ok, reusable, `end_run` worked) or
        stop it.  Returns the clean-up report for ``metadata.json``."""
        if ok and self.key is not None:
            try:
                net.end_run()
            except Exception as exc:
                net.cleanup_errors.append(f"reuse: {exc}")
            else:
                self.net = net
                return {"kept_for_next_run": True}
        net.stop()
        self.key = None
        return net.cleanup_report

    def close(self) -> None:
        """Stop the kept network, if any."""
        net, self.net, self.key = self.net, None, None
        if net is not None:
            net.stop()
