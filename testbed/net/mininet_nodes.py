"""Mininet interface and host classes that configure themselves with fewer program starts.

Mininet's `Intf` configures an interface with ``ifconfig``: a MAC change is three program
starts (down, ``hw ether``, up), an address one more, "up" another, and `Host.config`
repeats the MAC and address of the default interface and adds ``ifconfig lo up``.  A
program start costs about 0.5 s under the VM's software emulation, so a three-host
network spent 28 s of its 32 s start in these calls.  `QuickIntf` sends the same changes
as one ``ip -force -batch`` per call, skips a MAC the veth was created with (Mininet
passes it to ``ip link add``) and an address that is already set, and deletes a veth pair
once instead of once per end.  `QuickHost` configures its default interface and ``lo``
in one batch.  The results are the same interfaces, addresses and MACs as Mininet's own
classes would make; a change the kernel refuses raises `RunError` instead of being
logged and ignored.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, cast

from mininet.link import Intf
from mininet.node import Host, OVSSwitch

from testbed.core.commands import CommandRunner
from testbed.core.errors import CommandTimeout, RunError, TestbedError
from testbed.net.tags import bridge_option

if TYPE_CHECKING:
    from testbed.net.nettypes import MnController, MnLink, MnNode

ErrRun = Callable[[str], tuple[str, str, int]]  # Mininet's ``errRun`` for a command string
VsctlRun = Callable[[list[str]], tuple[str, str, int]]  # `run_vsctl`'s shape

_TOKEN = re.compile(r"[A-Za-z0-9_.:/@-]+")


def ip_batch_line(lines: list[str]) -> str:
    """The shell line that feeds lines to one ``ip -force -batch -`` (pure).

    Every word must be a plain token (names, addresses): the line goes through a node's
    shell.  Raises ValueError otherwise.
    """
    for line in lines:
        for word in line.split():
            if not _TOKEN.fullmatch(word):
                raise ValueError(f"not a plain ip(8) word: {word!r}")
    # printf is a shell builtin: the only program started is ip itself
    fmt = "".join(f"{line}\\n" for line in lines)
    return f"printf {shlex.quote(fmt)} | ip -force -batch -"


def split_ip(ipstr: str, prefix_len: int | None = None) -> tuple[str, int]:
    """``"10.0.0.1/8"`` or (``"10.0.0.1"``, 8) -> (address, prefix length)."""
    if "/" in ipstr:
        addr, plen = ipstr.split("/", 1)
        return addr, int(plen)
    if prefix_len is None:
        raise RunError(f"no prefix length for address {ipstr}")
    return ipstr, int(prefix_len)


NODE_CMD_TIMEOUT_S = 300.0  # a node's shell command (ip batch, ovs-vsctl) that hangs longer


class _ShellNode(Protocol):
    """What `BoundedCmd` uses of Mininet's `Node`: its shell's state and output."""

    name: str
    waiting: bool

    def sendInt(self) -> None: ...

    def monitor(self, timeoutms: int | None = None, findPid: bool = True) -> str: ...


class BoundedCmd:
    """Mixin for Mininet nodes: a command sent to the node's shell (``node.cmd``) that
    has not finished within `cmd_timeout_s` is interrupted (Ctrl-C to the shell) and
    raises `RunError`, instead of Mininet's wait without end."""

    cmd_timeout_s = NODE_CMD_TIMEOUT_S
    WAIT_AFTER_INTERRUPT_S = 5.0

    def waitOutput(self, verbose: bool = False, findPid: bool = True) -> str:
        """Mininet's wait for the shell's sentinel, with a deadline."""
        node = cast("_ShellNode", self)
        deadline = time.monotonic() + self.cmd_timeout_s
        output = ""
        while node.waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                node.sendInt()
                end = time.monotonic() + self.WAIT_AFTER_INTERRUPT_S
                while node.waiting and time.monotonic() < end:
                    node.monitor(timeoutms=200, findPid=findPid)
                node.waiting = False
                raise RunError(f"{node.name}: a command did not finish within "
                               f"{self.cmd_timeout_s:g}s and was interrupted")
            output += node.monitor(timeoutms=int(min(left, 1.0) * 1000) + 1, findPid=findPid)
        return output


_DELETED = "_tb_deleted"  # set on a Mininet link whose veth pair is gone


def mark_link_deleted(link: object) -> None:
    """Note that link's veth pair is gone (deleting one end removes both), so that
    `QuickIntf.delete` of either end has nothing left to do."""
    setattr(link, _DELETED, True)


class QuickIntf(Intf):
    """A Mininet `Intf` that applies MAC, address and up/down as one ``ip`` batch."""

    def __init__(self, name: str, node: MnNode | None = None, port: int | None = None,
                 link: MnLink | None = None, mac: str | None = None, **params: object):
        # a veth made by a Link already carries the MAC the Link passes here
        self._created_mac = mac if link is not None else None
        super().__init__(name, node=node, port=port, link=link, mac=mac, **params)

    # -- building blocks ----------------------------------------------------------------
    def mac_lines(self, mac: str | None) -> list[str]:
        """ip(8) lines that give this interface mac (none when it already has it)."""
        if not mac or mac == self._created_mac:
            return []
        self._created_mac = mac
        self.mac = mac
        # as Mininet does: down, change, up (not every driver changes a live address)
        return [f"link set dev {self.name} down", f"link set dev {self.name} address {mac}",
                f"link set dev {self.name} up"]

    def ip_lines(self, ipstr: str | None, prefix_len: int | None = None) -> list[str]:
        """ip(8) lines that make ipstr this interface's only address (none if it is)."""
        if not ipstr:
            return []
        addr, plen = split_ip(ipstr, prefix_len)
        if (addr, plen) == (self.ip, self.prefixLen):
            return []
        self.ip, self.prefixLen = addr, plen
        return [f"addr flush dev {self.name}", f"addr add {addr}/{plen} dev {self.name}"]

    def apply(self, lines: list[str]) -> str:
        """Run lines in one ``ip -batch`` in our node; raise `RunError` on any error."""
        if not lines:
            return ""
        out = self.cmd(ip_batch_line(lines)).strip()
        if out:
            raise RunError(f"configuring {self.name} in {self.node.name} failed: {out}")
        return out

    # -- Mininet's interface --------------------------------------------------------------
    def setMAC(self, macstr: str) -> str:  # Mininet's spelling
        return self.apply(self.mac_lines(macstr))

    def setIP(self, ipstr: str, prefixLen: int | None = None) -> str:  # Mininet's spelling
        lines = self.ip_lines(ipstr, prefixLen)
        if lines and "/" in ipstr:
            lines.append(f"link set dev {self.name} up")  # as `ifconfig <intf> <ip> up`
        return self.apply(lines)

    def isUp(self, setUp: bool = False) -> bool:  # Mininet's spelling
        if setUp:
            self.apply([f"link set dev {self.name} up"])
            return True
        flags = self.cmd(f"ip -o link show dev {self.name}").split(">", 1)[0]
        return "UP" in flags.split("<", 1)[-1].split(",")

    def config(self, mac: str | None = None, ip: str | None = None,
               ifconfig: str | list[str] | None = None, up: bool = True,
               **_params: object) -> dict[str, object]:
        lines = self.mac_lines(mac) + self.ip_lines(ip)
        if up:
            lines.append(f"link set dev {self.name} up")
        self.apply(lines)
        r: dict[str, object] = {"mac": mac, "ip": ip, "up": up}
        if ifconfig is not None:
            r["ifconfig"] = self.ifconfig(*(ifconfig if isinstance(ifconfig, list)
                                            else [ifconfig]))
        return r

    def delete(self) -> None:
        # deleting one end of a veth removes both: the second end has nothing left to do
        link = self.link
        if link is not None and getattr(link, _DELETED, False):
            self.node.delIntf(self)
            self.link = None
            return
        self.cmd(f"ip link del {self.name}")
        if link is not None:
            mark_link_deleted(link)
        self.node.delIntf(self)
        self.link = None


class QuickHost(BoundedCmd, Host):
    """A Mininet `Host` whose default-interface and loopback set-up is one ``ip`` batch."""

    def config(self, mac: str | None = None, ip: str | None = None,
               defaultRoute: object = None, lo: str = "up", **params: object
               ) -> dict[str, object]:
        intf = self.defaultIntf()
        lines: list[str] = []
        if isinstance(intf, QuickIntf):
            lines += intf.mac_lines(mac) + intf.ip_lines(ip)
        elif intf is not None:
            if mac:
                intf.setMAC(mac)
            if ip:
                intf.setIP(ip)
        lines.append(f"link set dev lo {lo}")
        out = self.cmd(ip_batch_line(lines)).strip()
        if out:
            raise RunError(f"configuring {self.name} failed: {out}")
        r: dict[str, object] = {"mac": mac, "ip": ip}
        self.setParam(r, "setDefaultRoute", defaultRoute=defaultRoute)
        return r


def with_inactivity_probe(vsctl_args: str, probe_ms: int) -> str:
    """Mininet's ``ovs-vsctl`` argument string with ``inactivity_probe`` set on every
    controller record it creates (pure)."""
    return vsctl_args.replace(" create Controller ",
                              f" create Controller inactivity_probe={int(probe_ms)} ")


VSCTL_TRIES = 3
VSCTL_RETRY_S = 2.0
# one transaction for the fat-tree's 20 bridges takes ~120 s under software emulation
VSCTL_BATCH_TIMEOUT_S = 600.0
_VSCTL_WORD = re.compile(r'[A-Za-z0-9_.:/@=,\[\]{}"+-]+')


def vsctl_argv(line: str) -> list[str]:
    """The words of Mininet's ``ovs-vsctl`` argument string, split as a shell would (pure).

    Mininet writes its ovs-vsctl arguments for a shell (``target=\\"tcp:...\\"``); they
    are split here and run as an argument list, never through a shell.  A word other than
    names, record fields and values (``-- add-br s1``, ``target="tcp:127.0.0.1:6653"``,
    ``other_config:datapath-id=...``) raises ValueError.
    """
    words = shlex.split(line)
    for word in words:
        if not _VSCTL_WORD.fullmatch(word):
            raise ValueError(f"not a plain ovs-vsctl word: {word!r}")
    return words


def run_vsctl(argv: list[str]) -> tuple[str, str, int]:
    """Run one ``ovs-vsctl`` argument list through the command gate, bounded by
    `VSCTL_BATCH_TIMEOUT_S`; returns (stdout, stderr, exit code) as Mininet's ``errRun``."""
    res = CommandRunner().run(argv, timeout=VSCTL_BATCH_TIMEOUT_S, check=False)
    return res.stdout, res.stderr, res.returncode


def run_split(cmd: str) -> tuple[str, str, int]:
    """Mininet's ``errRun`` for a command string (split on spaces, no shell), through the
    command gate and bounded by `VSCTL_BATCH_TIMEOUT_S`; a failure to run is returned as
    a non-zero exit (this serves shut-downs, which must go on)."""
    try:
        return run_vsctl([w for w in cmd.split(" ") if w])
    except TestbedError as exc:
        return "", str(exc), 1


def is_vsctl_error(output: str) -> bool:
    """True if ovs-vsctl's output (stdout and stderr together) reports a failure (pure);
    a bridge-creating transaction prints nothing when it succeeds."""
    return any(line.startswith("ovs-vsctl:") for line in output.splitlines())


class ProbedOVSSwitch(BoundedCmd, OVSSwitch):
    """An `OVSSwitch` whose controller connections carry an inactivity probe from the start.

    OVS drops a controller connection when an echo request goes unanswered for twice the
    probe interval (5 s by default).  A controller programming 20 switches on a loaded or
    software-emulated machine answers late, the switches reconnect, the controller
    re-programs them and falls further behind; setting the probe after the switches are
    programmed is too late for that.  inactivity_probe_ms: None keeps OVS's default.
    """

    def __init__(self, name: str, inactivity_probe_ms: int | None = None,
                 tag: str | None = None, **params: object):
        super().__init__(name, **params)
        self.inactivity_probe_ms = inactivity_probe_ms
        self.tag = tag  # the network's tag, set on the bridge (`testbed.net.tags`)
        self.vsctl_errors: list[str] = []  # outputs of ovs-vsctl calls that failed

    def vsctl(self, *args: object, **kwargs: object) -> str | None:
        if self.inactivity_probe_ms is not None:
            args = tuple(with_inactivity_probe(a, self.inactivity_probe_ms)
                         if isinstance(a, str) else a for a in args)
        out = super().vsctl(*args, **kwargs)
        if isinstance(out, str) and is_vsctl_error(out):
            self.vsctl_errors.append(out.strip())
        return out

    def bridgeOpts(self) -> str:
        """Mininet's bridge options, plus the network's tag in ``external_ids``."""
        opts = super().bridgeOpts()
        return f"{opts} {bridge_option(self.tag)}" if self.tag else opts

    def start(self, controllers: list[MnController]) -> None:
        """Mininet's start, but a failed ``ovs-vsctl`` is not ignored.

        Mininet discards the output of the one ``ovs-vsctl`` that creates the bridge, so a
        transaction the database refused left a switch that never reached its controller.
        The command deletes the bridge first (``--if-exists del-br``), so it is retried
        (3 tries, 2 s apart) before `RunError` names the bridge and the error.
        """
        out = ""
        for attempt in range(VSCTL_TRIES):
            if attempt:
                time.sleep(VSCTL_RETRY_S)
            self.vsctl_errors = []
            super().start(controllers)
            if not self.vsctl_errors:
                return
            out = self.vsctl_errors[-1]
        raise RunError(f"ovs-vsctl could not create bridge {self.name} "
                       f"({VSCTL_TRIES} tries): {out[-300:]}")

    @classmethod
    def batchShutdown(cls, switches: Sequence[ProbedOVSSwitch], run: ErrRun | None = None
                      ) -> Sequence[ProbedOVSSwitch]:
        """Mininet's batch shut-down (``ovs-vsctl del-br ...``, ``kill -HUP``), its commands
        run as argument lists with a timeout instead of waiting without end."""
        return super().batchShutdown(switches, run=run or run_split)

    @classmethod
    def batchStartup(cls, switches: Sequence[ProbedOVSSwitch], run: VsctlRun | None = None
                     ) -> Sequence[ProbedOVSSwitch]:
        """Every queued switch (``batch=True``) created in one ``ovs-vsctl`` transaction.

        One transaction is one reconfiguration of ovs-vswitchd, instead of one per switch
        whose cost grows with the bridges already there (1.5-2 s each for the fat-tree's 20
        under software emulation).  Mininet's own batch start ignores a failure; here the
        transaction, which deletes each bridge first (``--if-exists del-br``), is retried
        (`VSCTL_TRIES`) before `RunError` names the bridges and the error.  Switches
        started one by one (``batch=False``) have nothing queued and are left alone.
        """
        run = run or run_vsctl
        queued = [s for s in switches if s.commands]
        lines = [c.strip() for s in queued for c in s.commands]
        for s in queued:
            s.commands, s.batch = [], False
        if not lines:
            return switches
        try:
            words = [vsctl_argv(line) for line in lines]
        except ValueError as exc:
            raise RunError(f"refusing to create bridges "
                           f"{', '.join(s.name for s in queued)}: {exc}") from None
        chunks: list[list[str]] = []
        size = 0
        for line_words in words:  # Mininet's limit on one command line
            length = sum(len(w) + 1 for w in line_words)
            if chunks and size + length < cls.argmax:
                chunks[-1].extend(line_words)
                size += length
            else:
                chunks.append(["ovs-vsctl", *line_words])
                size = len("ovs-vsctl") + length
        for chunk in chunks:
            err = ""
            for attempt in range(VSCTL_TRIES):
                if attempt:
                    time.sleep(VSCTL_RETRY_S)
                try:
                    out, err, code = run(chunk)
                except CommandTimeout as exc:
                    raise RunError(f"ovs-vsctl did not create bridges "
                                   f"{', '.join(s.name for s in queued)} within "
                                   f"{exc.timeout:g}s") from None
                err = (err or out or "").strip() if code else ""
                if not code:
                    break
            else:
                names = ", ".join(s.name for s in queued)
                raise RunError(f"ovs-vsctl could not create bridges {names} "
                               f"({VSCTL_TRIES} tries): {err[-300:]}")
        return switches
