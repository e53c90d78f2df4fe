"""Transport profiles (``transport.profile``): named sets of host TCP settings.

A profile is data: the sysctls it writes in every host's namespace and the metrics it
puts on every IPv4 route of every host (``ip route change ... advmss 1000 initcwnd 2``),
each with the mechanism it stands for.  `testbed.plan.transport` merges a profile's
sysctls under the spec's own ``transport.sysctl`` (an explicit entry wins, so one
mechanism can be turned back on for an ablation); `testbed.host.transport` applies it.

* ``linux``: the kernel's defaults, nothing written.
* ``tcp-2006``: TCP as ns-2 simulated it in the mid-2000s (NewReno without SACK,
  1000-byte packets, an initial window of 2), for comparisons with papers of that time
  (study P3).  It needs ``cc = "reno"`` (`REQUIRED_CC`): Linux's reno without SACK
  recovers as NewReno does (RFC 6582).

Every sysctl here is under ``net.ipv4`` and per network namespace (Linux >= 4.15), so a
profile changes only the run's hosts.  Slow start after idle
(``tcp_slow_start_after_idle``) is left alone: a greedy sender waiting for its RTO across
an outage still has data in flight, so it is not idle in that sense.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType

DEFAULT_PROFILE = "linux"


@dataclass(frozen=True)
class ProfileSetting:
    """One setting of a profile.

    key: the sysctl name, or the route metric (``advmss``, ``initcwnd``); value: what it
    is set to; mechanism: what it turns off or stands for (for docs and metadata).
    """

    key: str
    value: str
    mechanism: str


@dataclass(frozen=True)
class TransportProfile:
    """A named set of host TCP settings (see the module docstring).

    name: as in ``transport.profile``; cc: the congestion control it requires (None:
    any); sysctls: written in every host; route_metrics: set on every IPv4 route of
    every host; description: one line for docs and metadata.
    """

    name: str
    description: str
    cc: str | None = None
    sysctls: tuple[ProfileSetting, ...] = ()
    route_metrics: tuple[ProfileSetting, ...] = ()

    def sysctl_values(self) -> dict[str, str]:
        """sysctl name -> value, in the profile's order."""
        return {s.key: s.value for s in self.sysctls}

    def route_values(self) -> dict[str, str]:
        """route metric -> value (``advmss``, ``initcwnd``)."""
        return {s.key: s.value for s in self.route_metrics}

    def as_record(self) -> dict[str, object]:
        """The profile for ``metadata.json``: its name, description and every setting
        with the mechanism it stands for."""
        return {"name": self.name, "description": self.description, "cc": self.cc,
                "sysctl": {s.key: {"value": s.value, "mechanism": s.mechanism}
                           for s in self.sysctls},
                "route_metrics": {s.key: {"value": s.value, "mechanism": s.mechanism}
                                  for s in self.route_metrics}}


TCP_2006 = TransportProfile(
    name="tcp-2006",
    description="ns-2-era TCP: NewReno without SACK, 1000-byte segments, initial window 2",
    cc="reno",
    sysctls=(
        ProfileSetting("net.ipv4.tcp_sack", "0",
                       "no selective acknowledgements (RFC 2018): NewReno repairs one "
                       "loss per round trip"),
        ProfileSetting("net.ipv4.tcp_dsack", "0",
                       "no duplicate SACK (RFC 2883), so no undo of spurious "
                       "retransmissions from it"),
        ProfileSetting("net.ipv4.tcp_frto", "0",
                       "no F-RTO (RFC 5682): every RTO is taken as a loss, no undo"),
        ProfileSetting("net.ipv4.tcp_recovery", "0",
                       "no RACK time-based loss detection (RFC 8985): losses are found "
                       "by three duplicate ACKs or the RTO only"),
        ProfileSetting("net.ipv4.tcp_early_retrans", "0",
                       "no tail loss probe (TLP, RFC 8985) and no early retransmit"),
        ProfileSetting("net.ipv4.tcp_timestamps", "0",
                       "no timestamps (RFC 7323): no per-segment RTT samples, no Eifel "
                       "undo, and full 1000-byte payloads"),
    ),
    route_metrics=(
        ProfileSetting("advmss", "1000",
                       "1000-byte segments (ns-2's packet size): every host advertises "
                       "an MSS of 1000"),
        ProfileSetting("initcwnd", "2",
                       "an initial window of 2 segments (RFC 2581/3390 era) instead of "
                       "10 (RFC 6928)"),
    ),
)

# read-only: the profiles are fixed data, not a registry to add to at run time
PROFILES = MappingProxyType({
    DEFAULT_PROFILE: TransportProfile(name=DEFAULT_PROFILE,
                                      description="the kernel's own TCP defaults"),
    TCP_2006.name: TCP_2006,
})
PROFILE_NAMES = tuple(PROFILES)


def profile_named(name: str) -> TransportProfile:
    """The profile called name (a validated ``transport.profile``); KeyError otherwise."""
    return PROFILES[name]


def without_route_metrics(route: Sequence[str], metrics: Iterable[str]) -> list[str]:
    """An ``ip route`` line's words without the given metrics and their values
    (``advmss 1000``, ``initcwnd lock 2``)."""
    names = set(metrics)
    out, i = [], 0
    while i < len(route):
        if route[i] in names:
            i += 2 + (i + 1 < len(route) and route[i + 1] == "lock")
            continue
        out.append(route[i])
        i += 1
    return out
