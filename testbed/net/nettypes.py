"""The objects `testbed.net` works with but does not define, as Protocols.

Mininet's classes carry no type hints; `MnNet`, `MnNode`, `MnSwitch`, `MnIntf` and
`MnLink` name the few attributes and methods of Mininet's network, nodes, interfaces
and links that the testbed reads.  Only `testbed.net.mininet_net` and
`testbed.net.mininet_nodes` make such objects; everything else works on any object that
has these attributes (Mininet's own, or a stand-in that records instead of creating).

`ControllerHook` is what a `testbed.net.network.Network` asks of a controller
(`controllers.launcher.ControllerProcess` is one); `NodeLookup` finds a node by name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol


class NftOwner(Protocol):
    """What a controller hook gets: a network that records the nftables tables it is
    given, to delete them with itself (`testbed.net.network.Network`)."""

    def add_nft_tables(self, tables: Sequence[tuple[str, str, str]]) -> None: ...


class MnController(Protocol):
    """The controller as Mininet's switches see it
    (`testbed.net.mininet_net.ControllerTarget`)."""

    protocol: str
    port: int

    def IP(self) -> str: ...  # Mininet's spelling


class MnIntf(Protocol):
    """A Mininet interface: its name, the node it belongs to, its IPv4 address."""

    name: str
    node: MnNode

    def IP(self) -> str | None: ...  # Mininet's spelling


class MnNode(Protocol):
    """A Mininet host or switch: a shell process (pid) in its namespaces."""

    name: str
    pid: int
    inNamespace: bool
    shell: object | None  # the node's shell process; None before it starts or after

    def intfList(self) -> list[MnIntf]: ...  # Mininet's spelling


class MnSwitch(MnNode, Protocol):
    """A Mininet switch: a node with an OpenFlow datapath id (hex)."""

    dpid: str


class MnLink(Protocol):
    """A Mininet link: a veth pair; an end is None once Mininet deleted it."""

    intf1: MnIntf | None
    intf2: MnIntf | None


class MnNet(Protocol):
    """Mininet's network object: its nodes and links, built, started and stopped."""

    hosts: list[MnNode]
    switches: list[MnSwitch]
    links: list[MnLink]
    nameToNode: dict[str, MnNode]

    def build(self) -> None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


NodeLookup = Callable[[str], MnNode]
"""The node (host or switch) with a given name; `InputError` when there is none."""


class ControllerHook(Protocol):
    """The controller a network starts and waits for (see `testbed.net.network.Network`).

    Optional attributes, read with defaults: ``port`` (6653), ``protocols``
    (``"OpenFlow13"``), ``inactivity_probe_ms`` (None) and ``proc`` (its process, whose
    pid goes into the manifest).
    """

    def start(self) -> None: ...

    def pre_switch_start(self, net: NftOwner) -> None: ...

    def wait_ready(self, switch_dpids: Sequence[int], timeout: float) -> object: ...

    def post_switch_start(self, net: NftOwner) -> None: ...

    def check_alive(self) -> None: ...

    def stop(self) -> None: ...
