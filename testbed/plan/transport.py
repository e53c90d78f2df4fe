"""The run's transport: TCP or MPTCP on the hosts, and each host's MPTCP role.

`TransportSettings` is the ``[transport]`` table in base units, as every host gets it
(`testbed.host.mptcp.configure_host` applies it), with its profile's sysctls merged
under the spec's own ``transport.sysctl`` (an explicit entry wins: `profile_sysctls`);
`transport_settings` makes it MPTCP when any workload opens MPTCP connections;
`mptcp_roles` says which end of a multipath topology opens the extra subflows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from testbed.core.errors import InputError
from testbed.plan.flowspec import FlowSpec
from testbed.spec.experiment import Experiment
from testbed.spec.model import BulkWorkload, FlowsWorkload, MultipathTopology, Transport
from testbed.spec.profile import DEFAULT_PROFILE, TransportProfile, profile_named
from testbed.spec.sysctl import check_sysctls

MAX_SUBFLOWS = 8           # MPTCP_PM_ADDR_MAX on 6.1
MAX_PER_PATH = 4


@dataclass(frozen=True)
class TransportSettings:
    """The `[transport]` table in base units (see docs/spec.md)."""

    protocol: str = "tcp"
    cc: str | None = "cubic"
    rmem: int | None = None
    wmem: int | None = None
    subflows: int | None = None
    subflows_per_path: int = 1
    scheduler: str | None = None
    sysctl: Mapping[str, Any] = field(default_factory=dict)
    profile: str = DEFAULT_PROFILE
    keep_neighbours: bool = False

    @property
    def profile_settings(self) -> TransportProfile:
        """The `TransportProfile` named by ``profile``."""
        return profile_named(self.profile)

    @property
    def route_metrics(self) -> dict[str, str]:
        """The metrics the profile puts on every route of every host ({}: none)."""
        return self.profile_settings.route_values()

    @classmethod
    def from_spec(cls, transport: Transport, protocol: str | None = None
                  ) -> TransportSettings:
        """From the spec's validated ``[transport]`` (sizes in bytes); protocol: instead of
        the table's own (the runner uses MPTCP only where a workload needs it).  sysctl:
        the profile's sysctls with the table's own ``sysctl`` over them."""
        ts = cls(protocol=protocol or transport.protocol, cc=transport.kernel_cc(),
                 rmem=transport.rmem, wmem=transport.wmem, subflows=transport.subflows,
                 subflows_per_path=transport.subflows_per_path,
                 scheduler=transport.scheduler, profile=transport.profile,
                 keep_neighbours=transport.keep_neighbours,
                 sysctl=profile_sysctls(profile_named(transport.profile),
                                        transport.sysctl))
        ts.check()
        return ts

    def check(self) -> None:
        """Raise `InputError` naming the key for out-of-range values."""
        if self.protocol not in ("tcp", "mptcp"):
            raise InputError(f"transport.protocol: {self.protocol!r}; use 'tcp' or 'mptcp'")
        if self.subflows is not None and not 1 <= self.subflows <= MAX_SUBFLOWS:
            raise InputError(f"transport.subflows: {self.subflows}; use 1..{MAX_SUBFLOWS}")
        if not 1 <= self.subflows_per_path <= MAX_PER_PATH:
            raise InputError(f"transport.subflows_per_path: {self.subflows_per_path}; "
                             f"use 1..{MAX_PER_PATH}")


def profile_sysctls(profile: TransportProfile, explicit: Mapping[str, Any]
                    ) -> dict[str, str]:
    """The sysctls every host gets: the profile's, then the spec's ``transport.sysctl``
    over them (an explicit entry wins, e.g. ``net.ipv4.tcp_sack = 1`` with ``tcp-2006``
    turns SACK back on for an ablation).

    profile: the spec's profile; explicit: its ``transport.sysctl``.  Values as strings.
    """
    return {**profile.sysctl_values(), **check_sysctls(explicit)}


def profile_overrides(profile: TransportProfile, explicit: Mapping[str, Any]
                      ) -> dict[str, str]:
    """The profile's sysctls that an explicit ``transport.sysctl`` entry sets to another
    value: key -> the profile's value (for ``metadata.json``)."""
    given = check_sysctls(explicit)
    return {k: v for k, v in profile.sysctl_values().items()
            if k in given and given[k] != v}


def uses_mptcp(exp: Experiment) -> bool:
    """Whether any workload's connections are MPTCP."""
    for wl in exp.workload:
        proto = getattr(wl, "protocol", None)
        if isinstance(wl, (BulkWorkload, FlowsWorkload)) and \
                (proto or exp.transport.protocol) == "mptcp":
            return True
    return False


def transport_settings(exp: Experiment) -> TransportSettings:
    """`TransportSettings` for the hosts: MPTCP if any workload needs it."""
    return TransportSettings.from_spec(exp.transport,
                                       protocol="mptcp" if uses_mptcp(exp) else "tcp")


def mptcp_roles(exp: Experiment, flows: Sequence[FlowSpec], hosts: Sequence[str]
                ) -> dict[str, str]:
    """The MPTCP path-manager role of each host: ``client`` opens extra subflows from its
    own addresses (``subflow`` endpoints), ``server`` announces them (``signal``) and
    accepts up to 8 from the peer.

    On a multipath topology the ``client`` host is the multi-homed one: it takes the
    ``client`` role when it opens MPTCP connections (uploads) and the ``server`` role
    when it only accepts them (downloads: the server then opens a subflow to each
    address the client announces). The single-homed ``server`` host is always
    ``server``. On other topologies every host is a ``client``.
    """
    if not isinstance(exp.topology, MultipathTopology):
        return dict.fromkeys(hosts, "client")
    mptcp = [f for f in flows if f.protocol == "mptcp"]
    opens = any(f.src == "client" for f in mptcp)
    accepts = any(f.dst == "client" for f in mptcp)
    return {h: ("client" if h == "client" and (opens or not accepts) else "server")
            for h in hosts}
