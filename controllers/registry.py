"""The one list of fabric controller apps: name -> module and class, aliases, description.

Everything that names a controller takes it from here: the launcher's command line
(``python -m controllers NAME``, its ``--help``), `controllers.launcher.ControllerProcess`,
the runner (a spec's ``controller.kind`` -> app) and the docs' tables.  The spec sits below
the controllers and cannot import them, so its allowed kinds are plain names in
`testbed.spec.controller_kinds`; `ControllerRegistry` refuses to be built unless it has
exactly one app per kind named there, in the same order.

A new app: its module (a `controllers.base.FabricApp` subclass with a ``POLICY`` from
`controllers.rules.POLICIES`), its kind in `testbed.spec.controller_kinds.FABRIC_KINDS`,
and a `ControllerApp` below.  This module stays light (no os-ken, no Mininet import) so
it can be used anywhere.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from testbed.core.errors import InputError
from testbed.spec.controller_kinds import FABRIC_KINDS


class UnknownAppError(InputError):
    """The controller app name is not one of the registry's."""


@dataclass(frozen=True)
class ControllerApp:
    """One fabric app.

    name: its registry name (``python -m controllers NAME``, ``metadata.json``'s app);
    kind: its name in a spec's ``controller.kind``; module: the os-ken app module;
    app_class: the `FabricApp` subclass in it; description: one line, what a switch does
    where it has a choice of next hop; aliases: other names accepted for it.
    """

    name: str
    kind: str
    module: str
    app_class: str
    description: str
    aliases: tuple[str, ...] = ()


class ControllerRegistry:
    """The fabric apps, by name.

    apps: one `ControllerApp` per kind; kinds: the spec's fabric kinds, which the apps'
    kinds must equal (same order).  Raises `ValueError` when they differ or a name or
    alias is given twice.
    """

    def __init__(self, apps: Sequence[ControllerApp], kinds: Sequence[str]):
        self._apps = tuple(apps)
        if tuple(a.kind for a in self._apps) != tuple(kinds):
            raise ValueError(f"controller apps for kinds {[a.kind for a in self._apps]} do "
                             f"not match the spec's kinds {list(kinds)}")
        self._by_name: dict[str, ControllerApp] = {}
        for app in self._apps:
            for name in (app.name, *app.aliases):
                if name in self._by_name:
                    raise ValueError(f"controller name {name!r} is given twice")
                self._by_name[name] = app
            if app.kind not in (app.name, *app.aliases):
                raise ValueError(f"controller {app.name!r}: its kind {app.kind!r} must be "
                                 "its name or an alias")

    def __iter__(self) -> Iterator[ControllerApp]:
        return iter(self._apps)

    def names(self) -> tuple[str, ...]:
        """The registry names, in order (``single_path``, ``ecmp``, ...)."""
        return tuple(a.name for a in self._apps)

    def kinds(self) -> tuple[str, ...]:
        """The spec's kinds of the apps, in order (``single-path``, ``ecmp``, ...)."""
        return tuple(a.kind for a in self._apps)

    def aliases(self) -> dict[str, str]:
        """{alias: registry name} of every alias."""
        return {alias: a.name for a in self._apps for alias in a.aliases}

    def app(self, name: str) -> ControllerApp:
        """The app called name (its registry name or an alias); `UnknownAppError` else."""
        app = self._by_name.get(name)
        if app is None:
            raise UnknownAppError(f"unknown controller app {name!r}; choose one of "
                                  f"{', '.join(self.names())}")
        return app


REGISTRY = ControllerRegistry((
    ControllerApp("single_path", "single-path", "controllers.single_path", "SinglePathApp",
                  "a fixed port per destination (D-mod-k): every packet between a host "
                  "pair takes one path", aliases=("single-path", "singlepath")),
    ControllerApp("ecmp", "ecmp", "controllers.ecmp", "EcmpApp",
                  "an OpenFlow select group with one bucket per equal-cost port: OVS hashes "
                  "each flow's 5-tuple, so a flow stays on one path"),
    ControllerApp("spray", "spray", "controllers.spray", "SprayApp",
                  "a random port per packet: nftables marks each packet on the switch's "
                  "decision ports, OpenFlow rules match pkt_mark"),
), FABRIC_KINDS)

APPS = MappingProxyType({a.name: a.module for a in REGISTRY})  # registry name -> module


def canonical_app(name: str) -> str:
    """The registry name for app name (accepting aliases such as ``single-path``).

    name: what the user wrote; raises `UnknownAppError` for anything else.
    """
    return REGISTRY.app(name).name


def app_module(name: str) -> str:
    """The Python module of app name (what os-ken's AppManager loads)."""
    return REGISTRY.app(name).module
