"""The run's topology, built from the spec as a pure Mininet `Topo` (no root needed), and
what the rest of the plan reads from it: hosts, addresses, interfaces to capture.

Building a topology imports its class: for ``topology.kind = "package.module:Class"`` that
is the user's module, trusted code (docs/security.md); anything but a `Topo` subclass is
refused before it is called (`custom_topology_class`).
"""

from __future__ import annotations

import importlib
import inspect
from typing import TYPE_CHECKING

from testbed.core.errors import SpecError
from testbed.plan.links import link_groups
from testbed.spec.experiment import Experiment
from testbed.spec.model import FatTreeTopology, MultipathTopology

if TYPE_CHECKING:  # Mininet is imported where a topology is built, not with this module
    from mininet.topo import Topo


def build_topology(exp: Experiment) -> Topo:
    """The Mininet `Topo` for the spec (pure; no root needed).

    exp: the resolved spec.
    """
    topo = exp.topology
    if isinstance(topo, MultipathTopology):
        from topologies.multipath import MultiHomedTopo

        return MultiHomedTopo(paths=topo.paths, server_multihomed=topo.server_multihomed)
    if isinstance(topo, FatTreeTopology):
        from topologies.fattree import FatTreeTopo

        return FatTreeTopo(k=topo.k, shape=topo.shape)
    klass = custom_topology_class(topo.kind)
    try:
        return klass(**topo.params)
    except TypeError as exc:
        raise SpecError(f"topology.params: {topo.kind} does not accept them ({exc})") from None


def custom_topology_class(kind: str) -> type[Topo]:
    """The class named by ``topology.kind = "package.module:Class"``, checked to be a
    subclass of Mininet's ``Topo`` before anything of it is called.

    Importing the module runs its code (as root, in a real run): a custom topology module
    is trusted code (docs/security.md).  Anything but a ``Topo`` subclass -- a function
    such as ``subprocess:getoutput``, an instance, a module -- raises `SpecError`.
    """
    from mininet.topo import Topo

    module, _, name = kind.partition(":")
    try:
        klass = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise SpecError(f"topology.kind: cannot load {kind!r} ({exc}); give "
                        "'package.module:Class' importable from the project") from None
    if not (inspect.isclass(klass) and issubclass(klass, Topo)):
        raise SpecError(f"topology.kind: {kind!r} is not a Mininet Topo subclass; give a "
                        "class derived from mininet.topo.Topo") from None
    return klass


def topo_hosts(exp: Experiment, topo: Topo) -> list[str]:
    """The hosts workloads may use: the spec's names, or every host of a custom class."""
    names = exp.topology.host_names()
    return list(names) if names is not None else sorted(topo.hosts())


def check_against_topology(exp: Experiment, topo: Topo) -> None:
    """Names the spec uses that the built topology lacks -> `SpecError` naming the key.

    exp: the spec; topo: `build_topology(exp)`.  Schedule events address the topology's
    shaped links (`testbed.plan.links.link_groups`).
    """
    hosts = set(topo.hosts())
    for i, wl in enumerate(exp.workload):
        for key in ("src", "dst", "hosts"):
            value = getattr(wl, key, None)
            for name in value if isinstance(value, list) else [value]:
                if name is not None and name not in hosts:
                    raise SpecError(f"workload[{i}].{key}: no host named {name!r} in "
                                    f"{exp.topology.kind}")
    links = link_groups(topo)
    for i, ev in enumerate(exp.schedule):
        if ev.link in links:
            continue
        if not links:
            hint = ("set the fat-tree's bw, delay, loss or queue" if exp.topology.kind == "fattree"
                    else "give its links a shape (bw, delay or loss)")
            raise SpecError(f"schedule[{i}].link: {ev.link!r}: this topology has no shaped "
                            f"link for a schedule to change; {hint}")
        known = ", ".join(sorted(links)[:8])
        raise SpecError(f"schedule[{i}].link: no shaped link named {ev.link!r}; links "
                        f"are {known}{' ...' if len(links) > 8 else ''}")


def path_addresses(exp: Experiment, topo: Topo) -> dict[tuple[str, str], str]:
    """(host, path) -> that host's address on the path (multipath topologies)."""
    from topologies.multipath import MultiHomedTopo

    if not isinstance(exp.topology, MultipathTopology):
        return {}
    assert isinstance(topo, MultiHomedTopo)
    out = {}
    for pa in topo.plan:
        out[("client", pa.name)] = pa.client_addr
        if pa.far_node == "server":
            out[("server", pa.name)] = pa.far_addr
    return out


def host_addresses(topo: Topo) -> dict[str, str]:
    """host -> its primary address, from the topology's host options."""
    out = {}
    for h in topo.hosts():
        ip = topo.nodeInfo(h).get("ip")
        if ip:
            out[h] = str(ip).split("/")[0]
    return out


def capture_targets(exp: Experiment, topo: Topo, hosts: list[str]) -> list[tuple[str, str]]:
    """(host, interface) pairs to capture, from ``[capture]`` (default: every host's)."""
    cap = exp.capture
    if not cap.enabled:
        return []
    chosen = cap.hosts or hosts
    out = []
    for n1, n2, info in topo.links(sort=True, withInfo=True):
        for node, port, name in ((n1, info.get("port1"), info.get("intfName1")),
                                 (n2, info.get("port2"), info.get("intfName2"))):
            if node in chosen:
                intf = name or f"{node}-eth{port}"
                if cap.interfaces is None or intf in cap.interfaces:
                    out.append((node, intf))
    if cap.interfaces:
        missing = sorted(set(cap.interfaces) - {i for _h, i in out})
        if missing:
            raise SpecError(f"capture.interfaces: {missing[0]!r} is not an interface of "
                            f"the captured hosts ({', '.join(chosen)})")
    return sorted(set(out))
