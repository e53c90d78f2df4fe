"""One network for consecutive runs that need the same one (`NetworkKeeper`).

Building the k=4 fat-tree takes about three minutes in the CI's software-emulated VM and
tearing it down one more, while a study's fat-tree runs differ only in the controller and
the workload.  A `NetworkKeeper` hands a run the network the previous run used when both
have the same `reuse_key`, and builds a fresh one otherwise.

Between two runs on one network (`Network.end_run`, `Network.begin_run`): every process
the first run started in the hosts is ended; its controller is stopped and its nftables
tables deleted; the next run's controller is started and waited for until it has wiped
and re-programmed every switch; links a schedule changed get their configured shape and
state back; each host's TCP metrics and neighbour caches are flushed and standalone
bridges forget learned MACs.  What stays: hosts, links, qdiscs, bridges, and the counters
of qdiscs and ports (the ``tc -s`` dumps in a bundle count from the network's start;
``metadata.json`` says so under ``network``).

Reuse is offered only for runs it should not change:

* the same topology and transport sections, TCP only and no link schedule (every sysctl
  a run writes is written again with the same value) -- the fat-tree's runs;
* or the same topology on a small network (at most `BASELINE_MAX_HOSTS` hosts, the
  multi-path ones) that took a baseline of every host's transport state when it was
  built (`testbed.net.hoststate`): between runs the sysctls, MPTCP endpoints and limits, and
  the rules and routes a run added are put back and checked, so runs with another
  congestion control, buffer, MPTCP or TCP, or a link schedule, follow on a network as
  good as new (`Network.begin_run` restores every link's shape and state).  A host
  that cannot be put back stops the network instead.  A spec whose
  ``transport.sysctl`` sets keys outside that baseline gets a network of its own.

A run
that fails while its network is up (or whose clean-up between runs fails) gets no
successor on it: the keeper stops it.  While a network waits between two runs its
manifest is in ``<state_dir>/_kept-network.json`` (and, trusted, in the testbed's own
state directory: `testbed.net.cleanup.state_dir`); the next keeper on that folder removes
what a killed process left there, by the trusted copy (`testbed.run.recovery`).  `close`
writes the last stop's report to ``<state_dir>/_network-teardown.json``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from testbed.core.commands import CommandRunner
from testbed.core.recording import recording
from testbed.plan.transport import uses_mptcp
from testbed.run.recovery import recover_dead_networks, recover_network
from testbed.spec.experiment import Experiment

if TYPE_CHECKING:
    from mininet.topo import Topo

    from controllers.launcher import ControllerProcess
    from testbed.net.network import Network

BASELINE_MAX_HOSTS = 4  # a baseline costs two reads per host per run (a few seconds)


def rps_wanted() -> bool:
    """Receive packet steering on the networks runs build: on, unless the environment
    says ``TESTBED_RPS=0`` (only to measure the emulator's own reordering; such a run's
    fidelity verdict says so, docs/fidelity.md)."""
    return os.environ.get("TESTBED_RPS", "1").strip() != "0"


def topology_key(exp: Experiment) -> str | None:
    """The text two runs share when a network with a host baseline may serve both (same
    topology, no extra sysctl outside the baseline); else None.  A link schedule is no
    obstacle here: `Network.begin_run` gives every link its configured shape and state
    back, and the baseline check would catch a host route a link change took away."""
    from testbed.net.hoststate import SYSCTL_PATTERN

    if any(not re.match(SYSCTL_PATTERN, k) for k in exp.transport.sysctl):
        return None
    data = exp.model_dump(mode="json", include={"topology"})
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def reuse_key(exp: Experiment) -> str | None:
    """The text two runs share exactly when one may use the other's network; None when
    the run needs a network of its own (MPTCP, a link schedule)."""
    if exp.transport.protocol != "tcp" or uses_mptcp(exp) or exp.schedule:
        return None
    data = exp.model_dump(mode="json", include={"topology", "transport"})
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


KEPT = "_kept-network.json"          # manifest of the network kept between two runs
TEARDOWN = "_network-teardown.json"  # what stopping the last kept network reported


class NetworkKeeper:
    """Hands runs a started `Network`, keeping it between runs with the same `reuse_key`.

    keep: False makes every run build and stop its own network (``--fresh-networks``);
    state_dir: where the kept network's manifest waits between two runs (``KEPT``: a
    process killed then leaves it for the next keeper on that folder to clean up) and
    where the final stop's report goes (``TEARDOWN``).  Call `close` when the runs are
    over (a `with` block does): it stops a kept network.
    """

    def __init__(self, keep: bool = True, state_dir: Path | None = None):
        self.keep = keep
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self.net: Network | None = None
        self.key: str | None = None       # `reuse_key` of the kept network's last run
        self.topo_key: str | None = None  # `topology_key`, if its hosts have a baseline
        self.built_by: str | None = None
        self.runs = 0  # runs the kept network has served
        self._recovered = False

    def __enter__(self) -> NetworkKeeper:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def acquire(self, exp: Experiment, topo: Topo, run_id: str, runner: CommandRunner,
                controller: ControllerProcess | None, workdir: Path
                ) -> tuple[Network, dict[str, Any]]:
        """A started network for this run, and what ``metadata.json`` says about it.

        exp: the run's `Experiment`; topo: its Mininet topology; run_id: the run's id;
        runner, controller, workdir: as for `Network`.  A kept network with another key
        is stopped first (through runner: its commands go into this run's transcript and
        its report into the returned dict).  Raises what `Network.start` /
        `Network.begin_run` raise.
        """
        from testbed.net.network import Network

        info: dict[str, Any] = {}
        recovered = self._recover(runner)
        if recovered:
            info["recovered_kept_network"] = recovered
        key = reuse_key(exp) if self.keep else None
        tkey = topology_key(exp) if self.keep else None
        if self.net is not None and ((key is not None and key == self.key)
                                     or (tkey is not None and tkey == self.topo_key)):
            self.key = key
            net = self.net
            self.net = None  # owned by the run until `release`
            self._forget_kept()
            try:
                net.begin_run(runner, controller, workdir)
            except BaseException:
                self.key = self.topo_key = None
                net.stop()
                raise
            self.runs += 1
            return net, {**info, "reused": True, "built_by": self.built_by,
                         "rps_mask": net.rps_mask,
                         "runs_before": self.runs - 1,
                         "counters": "qdisc and port counters count from the network's "
                                     "start"}
        if self.net is not None:
            self.net.runner = runner
            info["previous_network_teardown"] = self.close()
        hosts = topo.hosts() if hasattr(topo, "hosts") else []
        baseline = tkey is not None and 0 < len(hosts) <= BASELINE_MAX_HOSTS
        net = Network(topo, runner=runner, controller=controller, workdir=workdir,
                      baseline_hosts=baseline, rps=rps_wanted())
        net.start()
        self.key, self.built_by, self.runs = key, run_id, 1
        self.topo_key = tkey if baseline else None
        return net, {**info, "reused": False, "built_by": run_id, "runs_before": 0,
                     "rps_mask": net.rps_mask}

    def release(self, net: Network, ok: bool) -> dict[str, Any]:
        """The run is over: keep net for the next run (ok, reusable, `end_run` worked) or
        stop it.  Returns the clean-up report for ``metadata.json``.  Raises `RunError`
        when stopping a network of a run that went well had errors (as `Network` does at
        the end of a ``with`` block)."""
        if ok and (self.key is not None or self.topo_key is not None):
            try:
                net.end_run()
            except Exception as exc:
                net.cleanup_errors.append(f"could not be made ready for another run: {exc}")
            except BaseException:  # Ctrl-C or SIGTERM while cleaning between runs
                self.key = self.topo_key = None
                net.stop()
                raise
            else:
                self.net = net
                self._write_kept(net)
                return {"kept_for_next_run": True}
        self.key = self.topo_key = None
        return self._stop(net, raise_errors=ok)

    def close(self) -> dict[str, Any]:
        """Stop the kept network, if any; its report (also in ``state_dir/TEARDOWN``)."""
        net, self.net, self.key, self.topo_key = self.net, None, None, None
        if net is None:
            return {}
        report = self._stop(net, raise_errors=False)
        if self.state_dir is not None:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            (self.state_dir / TEARDOWN).write_text(json.dumps(report, indent=1) + "\n")
        self._forget_kept()
        return report

    # -- internals -------------------------------------------------------------------
    @staticmethod
    def _stop(net: Network, raise_errors: bool) -> dict[str, Any]:
        before = list(net.cleanup_errors)
        net.stop()
        report = dict(net.cleanup_report)
        if net.cleanup_errors:
            report["errors"] = list(net.cleanup_errors)
        new = net.cleanup_errors[len(before):]
        if raise_errors and new:
            from testbed.core.errors import RunError

            raise RunError("network clean-up had errors: " + "; ".join(new))
        return report

    def _write_kept(self, net: Network) -> None:
        if self.state_dir is not None:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            net.manifest.write(self.state_dir / KEPT)

    def _forget_kept(self) -> None:
        if self.state_dir is not None:
            from testbed.net.cleanup import discard_manifest

            (self.state_dir / KEPT).unlink(missing_ok=True)
            discard_manifest(self.state_dir / KEPT)

    def _recover(self, runner: CommandRunner) -> dict[str, list[str]]:
        """Once per keeper: remove a network an earlier process kept and never stopped
        (`testbed.run.recovery`), and every network whose creating process is gone
        (`testbed.run.recovery.recover_dead_networks`: a SIGKILLed sweep never resumed;
        not in a dry run), the latter under ``dead_networks`` (``<tag>: <what>``), with
        the BPF controls dead runs left registered (``coupled_cc``)."""
        if self._recovered:
            return {}
        self._recovered = True
        report: dict[str, list[str]] = {}
        if self.state_dir is not None:
            path = self.state_dir / KEPT
            report = recover_network(path, runner)
            path.unlink(missing_ok=True)
        if not recording(runner):
            from testbed.host.coupled.loader import release_stale
            released = release_stale(runner)  # BPF controls dead runs left registered
            if released:
                report["coupled_cc"] = released
            dead = recover_dead_networks(runner)
            if dead:
                report["dead_networks"] = [
                    f"{tag}: " + "; ".join(f"{k} {', '.join(v)}" for k, v in sorted(what.items()))
                    for tag, what in sorted(dead.items())]
        return report
