"""Tags on what a network makes, so that a clean-up removes only what carries its tag.

A network's manifest (`testbed.net.cleanup.Manifest`) has a tag of its own (`new_tag`);
its label ``testbed-net=<tag>`` goes on every resource it makes in the root namespace:
the switch-side veth ends as their interface alias (`alias_batch`, one ``ip -batch -``),
the OVS bridges as ``external_ids:testbed-net`` (`bridge_option`), the nftables tables
as their comment (`nft_comment_line`).  The parsers read the labels back from
``ip -j link show``, ``ovs-vsctl --format=json list Bridge`` and ``nft list ruleset``
(pure).
"""

from __future__ import annotations

import json
import re
import uuid

TAG_KEY = "testbed-net"
TAG_RE = re.compile(r"[0-9a-f]{8,32}")


def new_tag() -> str:
    """A fresh tag for one network's resources (16 hex digits)."""
    return uuid.uuid4().hex[:16]


def label_of(tag: str) -> str:
    """``testbed-net=<tag>`` ("" for no tag: nothing carries it)."""
    return f"{TAG_KEY}={tag}" if tag else ""


def bridge_option(tag: str) -> str:
    """The ovs-vsctl ``set bridge`` option that tags a bridge."""
    return f"external_ids:{TAG_KEY}={tag}"


def nft_comment_line(tag: str) -> str:
    """The line that tags an nftables table (first in its body)."""
    return f'comment "{label_of(tag)}"'


def alias_batch(interfaces: list[str], tag: str) -> str:
    """``ip -batch -`` input that sets every interface's alias to the tag's label."""
    return "".join(f"link set dev {name} alias {label_of(tag)}\n" for name in interfaces)


def link_aliases(text: str) -> dict[str, str]:
    """Interface name -> alias ("" when none) from ``ip -j link show`` output."""
    try:
        rows = json.loads(text or "[]")
    except ValueError:
        return {}
    return {str(r["ifname"]): str(r.get("ifalias") or "") for r in rows
            if isinstance(r, dict) and "ifname" in r}


def bridge_labels(text: str) -> dict[str, str]:
    """Bridge name -> its ``external_ids`` `TAG_KEY` label ("" when none), from
    ``ovs-vsctl --format=json --columns=name,external_ids list Bridge`` output."""
    try:
        data = json.loads(text or "{}")
    except ValueError:
        return {}
    out = {}
    for row in data.get("data", []) if isinstance(data, dict) else []:
        try:
            name, (_map, pairs) = row[0], row[1]
            ids = dict(pairs)
        except (TypeError, ValueError, IndexError):
            continue
        out[str(name)] = f"{TAG_KEY}={ids[TAG_KEY]}" if TAG_KEY in ids else ""
    return out


def nft_comments(text: str) -> dict[tuple[str, str], str]:
    """(family, name) -> the table's comment ("" when none), from ``nft list ruleset``
    or ``nft list table`` output (a table's comment is the line right after its head)."""
    out: dict[tuple[str, str], str] = {}
    head: tuple[str, str] | None = None
    for line in text.splitlines():
        words = line.split()
        if len(words) == 4 and words[0] == "table" and words[3] == "{":
            head = (words[1], words[2])
            out[head] = ""
        elif head is not None and words:
            m = re.fullmatch(r'\s*comment "(.*)"\s*;?\s*', line)
            if m:
                out[head] = m.group(1)
            head = None
    return out
