"""Removing what a killed run process left behind, by the manifest its network wrote.

Two places hold such a manifest: a bundle still marked ``running`` (its network's
``logs/network/network.json``: `recover_bundle`, called when a sweep resumes) and a
study's output folder while a network waited there between two runs
(``_kept-network.json``: `testbed.run.reuse.NetworkKeeper`).  What is removed comes from
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
