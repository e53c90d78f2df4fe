"""os-ken app `single_path`: one deterministic (D-mod-k) shortest path per host pair.

Run it with ``python -m controllers single_path --topo fattree,4``; the rules come from
`controllers.rules.single_path_rules`.
"""

from __future__ import annotations

from controllers.base import FabricApp


class SinglePathApp(FabricApp):
    """Fabric app for the ``single_path`` policy."""

    POLICY = "single_path"
