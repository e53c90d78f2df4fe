"""The nftables tables a network holds for its controller (spray's mark tables): made
in one ``nft -f -``, recorded in the manifest first, tagged with the network's tag
(`testbed.net.tags`), and deleted by name at the end while they carry it."""

from __future__ import annotations

from collections.abc import Sequence

from testbed.core.commands import CommandRunner
from testbed.core.errors import RunError
from testbed.net.record import NetworkRecord
from testbed.net.tags import nft_comment_line, nft_comments


def parse_nft_tables(text: str) -> set[tuple[str, str]]:
    """``nft list tables`` -> {(family, name)}."""
    out = set()
    for line in text.splitlines():
        tok = line.split()
        if len(tok) == 3 and tok[0] == "table":
            out.add((tok[1], tok[2]))
    return out


def add_tables(runner: CommandRunner, record: NetworkRecord,
               tables: Sequence[tuple[str, str, str]]) -> None:
    """Create tables, (family, name, body) each, with one ``nft list tables`` and one
    ``nft -f -``; `RunError` names any that exist already (they are not ours).  They go
    into record's manifest before they are made."""
    if not tables:
        return
    existing = parse_nft_tables(runner.run(["nft", "list", "tables"], record=False).stdout)
    clash = sorted(f"{f} {n}" for f, n, _b in tables if (f, n) in existing)
    if clash:
        raise RunError(f"nftables tables {', '.join(clash)} already exist; they are not "
                       "ours (delete them by hand if a previous run left them)")
    record.manifest.nft_tables.extend([f, n] for f, n, _b in tables)
    record.write()
    tag = nft_comment_line(record.manifest.tag)  # clean-up deletes only tagged tables
    script = "".join(f"table {f} {n} {{\n{tag}\n{b}\n}}\n" for f, n, b in tables)
    runner.run(["nft", "-f", "-"], input=script)


def delete_tables(runner: CommandRunner, record: NetworkRecord) -> None:
    """Delete the tables record's manifest lists that still exist and carry its tag (one
    ``nft list ruleset``, one ``nft -f -``), then forget them all; a recorded name that
    now holds an untagged table is left alone."""
    if not record.manifest.nft_tables:
        return
    label = record.manifest.label
    existing = nft_comments(runner.run(["nft", "list", "ruleset"], record=False).stdout)
    ours = [(f, n) for f, n in record.manifest.nft_tables
            if label and existing.get((f, n)) == label]
    if ours:
        runner.run(["nft", "-f", "-"],
                   input="".join(f"delete table {f} {n}\n" for f, n in ours))
    record.manifest.nft_tables.clear()
    record.write()
