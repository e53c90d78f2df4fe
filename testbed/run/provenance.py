"""What a reader needs to trust a run's result, for ``metadata.json``: the machine's
facts (kernel, tool and package versions, the git revision: `host_facts`) and the
state of the network the run left (every host's sysctls, the tc qdiscs, the switches'
OpenFlow tables: `node_dumps`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.core.commands import CommandRunner, in_parallel
from testbed.net.hoststate import SYSCTL_PATTERN, parse_sysctl, sysctl_keys

if TYPE_CHECKING:
    from testbed.net.network import Network


def _package_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


DEB_PACKAGES = ("mininet", "openvswitch-switch", "tshark", "tcpdump", "iproute2", "iperf3",
                "mptcpize", "nftables")


def parse_dpkg_status(text: str, packages: tuple[str, ...] = DEB_PACKAGES) -> dict[str, str]:
    """Installed versions of packages from ``/var/lib/dpkg/status`` text (others left out)."""
    out = {}
    for stanza in text.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            key, sep, value = line.partition(": ")
            if sep and not line.startswith(" "):
                fields[key] = value.strip()
        name = fields.get("Package")
        if name in packages and "installed" in fields.get("Status", "").split() \
                and "Version" in fields:
            out[name] = fields["Version"]
    return out


def git_revision(repo: Path) -> str | None:
    """The checked-out commit, read from ``.git`` without running git (fast in a VM).

    ``.git`` is a directory in a clone, and a ``gitdir: <path>`` file in a linked work
    tree (``git worktree add``), whose branch refs live in the main repository
    (``commondir``)."""
    git = repo / ".git"
    try:
        if git.is_file():
            text = git.read_text().strip()
            if not text.startswith("gitdir: "):
                return None
            git = repo / text[len("gitdir: "):]
        common = git
        if (git / "commondir").is_file():
            common = git / (git / "commondir").read_text().strip()
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head
        ref = head[5:]
        for where in (git, common):
            if (where / ref).is_file():
                return (where / ref).read_text().strip()
        for line in (common / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split(" ", 1)[0]
    except OSError:
        return None
    return None


@functools.lru_cache(maxsize=1)
def host_facts() -> dict[str, Any]:
    """Kernel, tool and package versions, the git revision: what a reader needs to trust a
    result. Computed once per process (the same for every run of a sweep); ``git_dirty``
    is None inside `testbed vm` (git status re-reads every file there: minutes)."""
    import platform

    from testbed import __version__

    repo = Path(__file__).resolve().parents[2]
    dirty = None
    if os.environ.get("TESTBED_IN_VM") != "1":  # git re-reads every file over the VM's 9p
        try:
            res = CommandRunner().run(["git", "-C", str(repo), "status", "--porcelain",
                                       "--untracked-files=no"], check=False, timeout=20)
            dirty = bool(res.stdout.strip()) if res.returncode == 0 else None
        except Exception:  # facts must never cost the run
            dirty = None
    try:
        debs = parse_dpkg_status(Path("/var/lib/dpkg/status").read_text(errors="replace"))
    except OSError:
        debs = {}
    try:
        from mininet.net import VERSION as mininet_version
    except ImportError:
        mininet_version = None
    return {
        "kernel": platform.release(), "kernel_version": platform.version(),
        "machine": platform.machine(), "hostname": platform.node(),
        "python": platform.python_version(),
        "versions": {
            "testbed": __version__, "git_revision": git_revision(repo), "git_dirty": dirty,
            "mininet": mininet_version, "os-ken": _package_version("os-ken"),
            "pydantic": _package_version("pydantic"), "debian_packages": debs,
        },
    }


def node_dumps(runner: CommandRunner, net: Network, hosts: Sequence[str], logs: Path,
               openflow: bool) -> dict[str, Any]:
    """Sysctls of every host, tc of every shaped interface, OVS flows of every switch.

    Full texts go to ``logs/``; metadata gets the TCP/MPTCP sysctls and the dumps.
    Hosts and switches are dumped a few at a time (a fat-tree has 16 and 20).
    """
    out: dict[str, Any] = {"sysctls": {}, "tc": {}, "ovs": {}}
    keys = sysctl_keys()

    def sysctls(h: str) -> str:
        argv = ["sysctl", "-e", *keys] if keys else ["sysctl", "-a", "-r", SYSCTL_PATTERN]
        return runner.run(argv, host=net.host(h), check=False, record=False).stdout

    for h, text in zip(hosts, in_parallel(sysctls, hosts), strict=True):
        (logs / f"sysctl-{h}.txt").write_text(text)
        out["sysctls"][h] = parse_sysctl(text)
    try:
        out["tc"] = net.tc_dump()
    except Exception as exc:  # a dump must never cost the run
        out["tc"] = {"error": str(exc)}
    (logs / "tc.txt").write_text("".join(f"# {k}\n{v}\n" for k, v in out["tc"].items()))

    def flows(sw: str) -> str:
        argv = ["ovs-ofctl", *(["-O", "OpenFlow13"] if openflow else []), "dump-flows", sw]
        res = runner.run(argv, check=False, record=False)
        return res.stdout if res.returncode == 0 else res.stderr

    switches = sorted(net.topo.switches())
    for sw, text in zip(switches, in_parallel(flows, switches), strict=True):
        out["ovs"][sw] = text
        (logs / f"ovs-{sw}.txt").write_text(text)
    return out
