"""What a network has created so far, written down as it goes (``<workdir>/network.json``).

`NetworkRecord` holds one network's `Manifest` and the folder its file goes to, and
notes what Mininet made (host and switch shells, namespaces, veth ends, bridges) and
the controller's process.  Every change is written at once (with its trusted copy, see
`testbed.net.cleanup`), so `cleanup_from_manifest` can finish the job after a SIGKILL.
"""

from __future__ import annotations

from pathlib import Path

from testbed.net.cleanup import MANIFEST, Manifest, netns_inode
from testbed.net.nettypes import ControllerHook, MnNet


class NetworkRecord:
    """A network's manifest and where it is kept.

    workdir: the folder ``network.json`` goes to (None: kept in memory only); a kept
    network moves it to each run's bundle (`testbed.net.network.Network.begin_run`).
    """

    def __init__(self, workdir: Path | None = None):
        self.manifest = Manifest()
        self.workdir = workdir

    def write(self) -> None:
        """Write the manifest to ``<workdir>/network.json`` (nothing without a workdir)."""
        if self.workdir is not None:
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.manifest.write(self.workdir / MANIFEST)

    def note_nodes(self, mn: MnNet) -> None:
        """Note every node, interface and bridge Mininet has made so far."""
        m = self.manifest
        for h in mn.hosts:
            if h.name not in m.hosts and h.shell is not None:
                m.hosts[h.name] = h.pid
                ino = netns_inode(h.pid) if h.inNamespace else None
                if ino is not None:
                    m.netns[h.name] = ino
        for s in mn.switches:
            if s.name not in m.switches and s.shell is not None:
                m.switches[s.name] = s.pid
                if s.name not in m.bridges:
                    m.bridges.append(s.name)
        for link in mn.links:
            for intf in (link.intf1, link.intf2):
                if intf is not None and intf.name not in m.interfaces:
                    m.interfaces.append(intf.name)
        self.write()

    def note_controller(self, ctl: ControllerHook) -> None:
        """Put the controller's process (pid, start time) into the manifest, so that a
        clean-up after a SIGKILL of this process ends it too."""
        self.manifest.record_process("controller", getattr(getattr(ctl, "proc", None),
                                                           "pid", None))
        self.write()
