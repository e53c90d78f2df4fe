"""The controller kinds a spec may name (``[controller] kind``): plain names, no imports.

The fabric apps themselves are listed once, in `controllers.registry` (module, class,
aliases, description).  The controllers sit above the spec, so the spec cannot ask them;
it validates against the names here instead, and the registry is built on the same names
and refuses to load unless it has exactly one app per fabric kind.  A new controller is a
name here and an entry there.
"""

from __future__ import annotations

NO_CONTROLLER = "none"  # the kind of a topology without SDN switches (multipath)
FABRIC_KINDS = ("single-path", "ecmp", "spray")  # one fabric app each (controllers.registry)
CONTROLLER_KINDS = (NO_CONTROLLER, *FABRIC_KINDS)


def quoted_choices(names: tuple[str, ...]) -> str:
    """``'a', 'b' or 'c'``: names as a message lists them."""
    quoted = [f"'{n}'" for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
