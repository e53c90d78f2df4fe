"""os-ken app `spray`: random packet spraying, one random next hop per packet.

The switch matches ``pkt_mark`` drawn per packet by nftables ingress chains on its decision
ports; `controllers.launcher.ControllerProcess` creates and removes those chains.

Run it with ``python -m controllers spray --topo fattree,4``; the rules come from
`controllers.rules.spray_rules`.
"""

from __future__ import annotations

from controllers.base import FabricApp


class SprayApp(FabricApp):
    """Fabric app for the ``spray`` policy."""

    POLICY = "spray"
