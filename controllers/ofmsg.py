"""Turn the rule descriptions of `controllers.rules` into os-ken OpenFlow 1.3 messages.

Only this module knows os-ken's message classes; it is exercised by the golden tests
through a fake datapath (anything with ``ofproto`` and ``ofproto_parser``).
"""

from __future__ import annotations

from typing import Any

from controllers.rules import Rule


class RuleFormatError(ValueError):
    """A rule description that this module cannot translate (a programming error)."""


def to_action(dp: Any, action: dict) -> Any:
    """One action description -> an os-ken action for datapath dp."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    kind = action["type"]
    if kind == "output":
        port = ofp.OFPP_IN_PORT if action["port"] == "in_port" else int(action["port"])
        return parser.OFPActionOutput(port, 0)
    if kind == "group":
        return parser.OFPActionGroup(int(action["group_id"]))
    if kind == "set_field":
        return parser.OFPActionSetField(**{action["field"]: action["value"]})
    if kind == "move":
        return parser.NXActionRegMove(src_field=action["src"], dst_field=action["dst"],
                                      n_bits=int(action["n_bits"]))
    raise RuleFormatError(f"unknown action type {kind!r}")


def to_messages(dp: Any, rule: Rule, refresh: bool = False) -> list[Any]:
    """One rule description -> the os-ken messages that implement it, in order.

    refresh: the switch already holds this rule set (a reconnect): skip the reset and
    modify groups in place, so forwarding never stops (re-adding a flow with the same
    match and priority replaces it atomically).
    """
    ofp, parser = dp.ofproto, dp.ofproto_parser
    kind = rule["kind"]
    if kind == "reset":
        if refresh:
            return []
        return [
            parser.OFPFlowMod(dp, table_id=ofp.OFPTT_ALL, command=ofp.OFPFC_DELETE,
                              out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                              match=parser.OFPMatch()),
            parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, type_=ofp.OFPGT_ALL,
                               group_id=ofp.OFPG_ALL),
        ]
    if kind == "group":
        if rule["group_type"] != "select":
            raise RuleFormatError(f"unsupported group type {rule['group_type']!r}")
        buckets = [parser.OFPBucket(weight=1, watch_port=ofp.OFPP_ANY, watch_group=ofp.OFPG_ANY,
                                    actions=[to_action(dp, a) for a in bucket])
                   for bucket in rule["buckets"]]
        command = ofp.OFPGC_MODIFY if refresh else ofp.OFPGC_ADD
        return [parser.OFPGroupMod(dp, command=command, type_=ofp.OFPGT_SELECT,
                                   group_id=int(rule["group_id"]), buckets=buckets)]
    if kind == "flow":
        actions = [to_action(dp, a) for a in rule["actions"]]
        inst = ([parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
                if actions else [])
        return [parser.OFPFlowMod(dp, table_id=0, command=ofp.OFPFC_ADD,
                                  priority=int(rule["priority"]),
                                  match=parser.OFPMatch(**rule["match"]), instructions=inst)]
    raise RuleFormatError(f"unknown rule kind {kind!r}")


def rule_messages(dp: Any, rules: list[Rule], refresh: bool = False) -> list[Any]:
    """All messages for a rule list, in order (without the final barrier).

    refresh: see `to_messages`.
    """
    return [msg for rule in rules for msg in to_messages(dp, rule, refresh)]
