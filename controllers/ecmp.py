"""os-ken app `ecmp`: per-flow ECMP, OpenFlow select groups over the equal-cost next hops.

Run it with ``python -m controllers ecmp --topo fattree,4``; the rules come from
`controllers.rules.ecmp_rules`.
"""

from __future__ import annotations

from controllers.base import FabricApp


class EcmpApp(FabricApp):
    """Fabric app for the ``ecmp`` policy."""

    POLICY = "ecmp"
