"""Removing what a killed run process left behind, by the manifest its network wrote.

Two places hold such a manifest: a bundle still marked ``running`` (its network's
``logs/network/network.json``: `recover_bundle`, called when a sweep resumes) and a
study's output folder while a network waited there between two runs
(``_kept-network.json``: `testbed.run.reuse.NetworkKeeper`).  `recover_dead_networks`
finds the rest: every network in the state directory whose creating process is gone.
What is removed comes from
the trusted copy in the testbed's state directory alone, never from the file in the
output folder (`testbed.net.cleanup.cleanup_from_manifest`).  The coupled congestion
controls a dead run left registered are released too, by the state directory's records
(`testbed.host.coupled.loader.release_stale`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from testbed.core.commands import CommandRunner

if TYPE_CHECKING:
    from testbed.results.bundle import Bundle


def recover_network(manifest: Path, runner: CommandRunner | None = None
                    ) -> dict[str, list[str]]:
    """Remove the network whose manifest was written to manifest, if any is recorded
    (the file or its trusted copy); returns what was removed.

    runner: where the clean-up commands go (None: a runner of its own).
    """
    from testbed.net.cleanup import cleanup_from_manifest, has_manifest

    if not manifest.is_file() and not has_manifest(manifest):
        return {}
    return cleanup_from_manifest(manifest, runner)  # acts on the state directory's copy


def recover_bundle(bundle: Bundle) -> dict[str, list[str]]:
    """Remove what the network of a run whose process died left behind (by its manifest).

    bundle: a bundle still marked ``running``; returns what was removed.
    """
    from testbed.host.coupled.loader import release_stale
    from testbed.net.cleanup import MANIFEST

    report = recover_network(bundle.logs_dir / "network" / MANIFEST)
    released = release_stale(CommandRunner())  # coupled CCs a dead run left registered
    if released:
        report["coupled_cc"] = released
    return report


def recover_dead_networks(runner: CommandRunner | None = None
                          ) -> dict[str, dict[str, list[str]]]:
    """Clean up every network in the state directory whose creating process is gone
    (its manifest's ``owner`` pid no longer has the recorded start time): what a SIGKILL
    left, for a sweep that is never resumed.  Networks of running processes, and
    manifests without an owner (written before owners were recorded), are left alone;
    a manifest that cannot be read is reported and kept.  Returns what was removed, by
    network tag."""
    from testbed.core.errors import InputError, TestbedError
    from testbed.core.statedir import process_start_time, state_dir
    from testbed.net.cleanup import Manifest, remove_dead

    runner = runner or CommandRunner()
    out: dict[str, dict[str, list[str]]] = {}
    folder = state_dir() / "networks"
    for copy in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            manifest = Manifest.read(copy)
        except InputError as exc:
            out[copy.stem] = {"unreadable": [str(exc)]}
            continue
        if len(manifest.owner) != 2 or process_start_time(manifest.owner[0]) == \
                manifest.owner[1]:
            continue
        try:
            out[manifest.tag or copy.stem] = remove_dead(manifest, runner)
        except TestbedError as exc:
            out[manifest.tag or copy.stem] = {"error": [str(exc)]}
            continue
        copy.unlink(missing_ok=True)
    return out
