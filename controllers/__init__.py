"""os-ken (Ryu) SDN applications for the fat-tree and the launcher that runs them.

Apps (OpenFlow 1.3, rules installed proactively when a switch connects), one per
forwarding policy, are listed once, in `controllers.registry` (name, module, aliases,
description); everything else takes them from there.

Run one with ``python -m controllers <app> --topo fattree,4 [--port 6653]``; from Python,
`controllers.launcher.ControllerProcess` plugs into `testbed.net.network.Network`.
This module stays light (no os-ken import): `layout_for` turns a topology description
into the `FabricLayout` the apps route on.
"""

from __future__ import annotations

from typing import Any


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
