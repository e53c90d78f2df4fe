"""Pure rule building: what each policy installs on one switch, as plain JSON-able dicts.

A rule set is a list of message descriptions, sent in order:

- ``{"kind": "reset"}`` — delete every flow and group (a reconnecting switch starts clean);
- ``{"kind": "group", "group_id": 1, "group_type": "select", "buckets": [[action, ...], ...]}``;
- ``{"kind": "flow", "priority": 200, "match": {"eth_type": 2048, "ipv4_dst": "10.1.0.2"},
  "actions": [action, ...]}`` (no actions = drop);

with actions ``{"type": "output", "port": 3}`` (``"port": "in_port"`` sends back),
``{"type": "group", "group_id": 1}``, ``{"type": "set_field", "field": "eth_src", "value": ...}``
and ``{"type": "move", "src": "eth_src", "dst": "eth_dst", "n_bits": 48}`` (an OVS
register move).  `controllers.ofmsg` turns them into os-ken messages.

Common to every policy (table 0):

- priority 0: table miss -> drop (nothing is ever flooded, so the looped fabric cannot storm);
- priority 100, edge switches only: an ARP responder per fabric host — an ARP request for
  host X's address is rewritten in the switch into X's reply and sent back out of its
  ingress port; no ARP leaves the edge (see docs/controllers.md);
- priority 200: one IPv4 rule per destination host, whose action depends on the policy.

Policies, for a destination with several equal-cost next hops ``ports`` (sorted):

- ``single_path``: destination-based D-mod-k choice, port
  ``ports[(dst_index // n**(level-1)) % n]`` with n = len(ports), level 1 at the edge and
  2 at the aggregation layer; every packet between a host pair takes the same path and
  the destinations spread over all core switches.
- ``ecmp``: an OpenFlow select group with one bucket per port (OVS hashes each flow's
  5-tuple, so a flow stays on one path).
- ``spray``: one rule per random mark ``m`` (``pkt_mark=m -> ports[m % n]``); the mark is
  drawn per packet by nftables on the switch's decision ingress ports (`spray_nft_script`).
"""

from __future__ import annotations

from collections.abc import Callable

from controllers.paths import Routes
from topologies.fattree import FabricLayout

ETH_IPV4 = 0x0800
ETH_ARP = 0x0806
PRIO_MISS, PRIO_ARP, PRIO_IPV4 = 0, 100, 200
NFT_TABLE_PREFIX = "mptb_spray_"

Rule = dict
Policy = Callable[[Routes, str], list[Rule]]


def output(port: int | str) -> dict:
    """An output action (port number, or ``"in_port"``)."""
    return {"type": "output", "port": port}


def flow(priority: int, match: dict, actions: list[dict]) -> Rule:
    """A flow-mod description for table 0."""
    return {"kind": "flow", "priority": priority, "match": match, "actions": actions}


def arp_responder(ip: str, mac: str) -> Rule:
    """A flow that answers ARP requests for ip with mac, in the switch, back out the in-port.

    ip: the host's IPv4 address; mac: its MAC address.
    """
    return flow(PRIO_ARP, {"eth_type": ETH_ARP, "arp_op": 1, "arp_tpa": ip}, [
        {"type": "move", "src": "eth_src", "dst": "eth_dst", "n_bits": 48},
        {"type": "set_field", "field": "eth_src", "value": mac},
        {"type": "set_field", "field": "arp_op", "value": 2},
        {"type": "move", "src": "arp_sha", "dst": "arp_tha", "n_bits": 48},
        {"type": "set_field", "field": "arp_sha", "value": mac},
        {"type": "move", "src": "arp_spa", "dst": "arp_tpa", "n_bits": 32},
        {"type": "set_field", "field": "arp_spa", "value": ip},
        output("in_port"),
    ])


def common_rules(layout: FabricLayout, switch: str) -> list[Rule]:
    """Reset, table-miss drop and (on switches with hosts attached) the ARP responders."""
    rules: list[Rule] = [{"kind": "reset"}, flow(PRIO_MISS, {}, [])]
    if any(h.switch == switch for h in layout.hosts):
        rules += [arp_responder(h.ip, h.mac) for h in layout.hosts]
    return rules


def ipv4_match(ip: str, **extra: int) -> dict:
    """Match IPv4 packets for destination ip (plus extra fields such as pkt_mark)."""
    return {"eth_type": ETH_IPV4, "ipv4_dst": ip, **extra}


def single_path_rules(routes: Routes, switch: str) -> list[Rule]:
    """Rules for `single_path`: one deterministic (D-mod-k) next hop per destination."""
    layout = routes.layout
    level = layout.switch(switch).level
    rules = common_rules(layout, switch)
    for index, host in enumerate(layout.hosts):
        ports = routes.hops[switch][host.name]
        n = len(ports)
        port = ports[(index // n ** max(level - 1, 0)) % n]
        rules.append(flow(PRIO_IPV4, ipv4_match(host.ip), [output(port)]))
    return rules


def ecmp_groups(routes: Routes, switch: str) -> dict[tuple[int, ...], int]:
    """Group id for each distinct multi-port next-hop set of switch (ids from 1, sorted)."""
    sets = sorted({p for p in routes.hops[switch].values() if len(p) > 1})
    return {ports: i + 1 for i, ports in enumerate(sets)}


def ecmp_rules(routes: Routes, switch: str) -> list[Rule]:
    """Rules for `ecmp`: select groups over the equal-cost ports, one IPv4 rule per host."""
    layout = routes.layout
    groups = ecmp_groups(routes, switch)
    rules = common_rules(layout, switch)
    rules += [{"kind": "group", "group_id": gid, "group_type": "select",
               "buckets": [[output(p)] for p in ports]} for ports, gid in groups.items()]
    for host in layout.hosts:
        ports = routes.hops[switch][host.name]
        action = ({"type": "group", "group_id": groups[ports]} if len(ports) > 1
                  else output(ports[0]))
        rules.append(flow(PRIO_IPV4, ipv4_match(host.ip), [action]))
    return rules


def spray_rules(routes: Routes, switch: str) -> list[Rule]:
    """Rules for `spray`: per random mark m, ``pkt_mark=m -> ports[m % n]``."""
    layout = routes.layout
    width = routes.choice_width(switch)
    rules = common_rules(layout, switch)
    for host in layout.hosts:
        ports = routes.hops[switch][host.name]
        if len(ports) == 1:
            rules.append(flow(PRIO_IPV4, ipv4_match(host.ip), [output(ports[0])]))
            continue
        rules += [flow(PRIO_IPV4, ipv4_match(host.ip, pkt_mark=mark),
                       [output(ports[mark % len(ports)])]) for mark in range(width)]
    return rules


def interface_name(switch: str, port: int) -> str:
    """Mininet's name for port of switch (``E0-eth1``)."""
    return f"{switch}-eth{port}"


def nft_table_name(switch: str) -> str:
    """The nftables netdev table that draws spray marks on switch's ports."""
    return f"{NFT_TABLE_PREFIX}{switch}"


def spray_nft_script(routes: Routes, switch: str) -> str | None:
    """The ``nft -f`` script creating switch's spray table, or None if it makes no choice.

    One netdev ingress chain per decision port sets ``meta mark`` to a uniform random
    number in ``[0, width)``; width is the lcm of the switch's next-hop set sizes.
    """
    ports = routes.choice_ports(switch)
    width = routes.choice_width(switch)
    if not ports or width < 2:
        return None
    lines = [f"table netdev {nft_table_name(switch)} {{"]
    for port in ports:
        lines += [f"  chain p{port} {{",
                  f'    type filter hook ingress device "{interface_name(switch, port)}" '
                  "priority 0;",
                  f"    meta mark set numgen random mod {width}",
                  "  }"]
    lines.append("}")
    return "\n".join(lines) + "\n"


POLICIES: dict[str, Policy] = {
    "single_path": single_path_rules,
    "ecmp": ecmp_rules,
    "spray": spray_rules,
}
