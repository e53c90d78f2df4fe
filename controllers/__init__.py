"""os-ken (Ryu) SDN applications for the fat-tree and the launcher that runs them.

Apps (OpenFlow 1.3, rules installed proactively when a switch connects):

- ``single_path`` — one deterministic shortest path per host pair;
- ``ecmp`` — per-flow load balancing with select groups;
- ``spray`` — per-packet random choice via nftables marks and ``pkt_mark`` rules.

Run one with ``python -m controllers <app> --topo fattree,4 [--port 6653]``; from Python,
`controllers.launcher.ControllerProcess` plugs into `testbed.net.network.Network`.
This module stays light (no os-ken import) so the registry can be used anywhere.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from testbed.core.errors import InputError

APPS = MappingProxyType({
    "single_path": "controllers.single_path",
    "ecmp": "controllers.ecmp",
    "spray": "controllers.spray",
})
ALIASES = MappingProxyType({"single-path": "single_path", "singlepath": "single_path"})


class UnknownAppError(InputError):
    """The controller app name is not one of `APPS`."""


def canonical_app(name: str) -> str:
    """The registry name for app name (accepting aliases such as ``single-path``).

    name: what the user wrote; raises `UnknownAppError` for anything else.
    """
    key = ALIASES.get(name, name)
    if key not in APPS:
        raise UnknownAppError(f"unknown controller app {name!r}; choose one of "
                              f"{', '.join(APPS)}")
    return key


def app_module(name: str) -> str:
    """The Python module of app name (what os-ken's AppManager loads)."""
    return APPS[canonical_app(name)]


def layout_for(topo: Any) -> Any:
    """A `FabricLayout` from a layout object, ``"fattree,K"`` / ``"fattree"``, or a dict.

    topo: what describes the topology; raises `TopologyError` if it cannot be understood.
    """
    from topologies.fattree import FabricLayout, TopologyError, fattree_layout

    if isinstance(topo, FabricLayout):
        return topo
    if isinstance(topo, dict):
        return FabricLayout.from_dict(topo)
    if isinstance(topo, str):
        kind, _, arg = topo.partition(",")
        if kind.strip() == "fattree":
            return fattree_layout(int(arg) if arg.strip().isdigit() else (arg or 4))
        raise TopologyError(f"topology {topo!r} has no layout the controllers can route; "
                            "use 'fattree,K' or a layout JSON file (FabricLayout.to_dict())")
    # a FatTreeTopo instance (or any Topo carrying a layout)
    layout = getattr(topo, "layout", None)
    if isinstance(layout, FabricLayout):
        return layout
    raise TopologyError(f"topology {type(topo).__name__} has no layout the controllers can route;"
                        " use FatTreeTopo or a FabricLayout")
