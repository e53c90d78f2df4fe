"""`ControllerProcess`: runs a fabric app as a child process and plugs into `Network`.

Lifecycle, as `testbed.net.network.Network` drives it::

    ctl = ControllerProcess("spray", FatTreeTopo(4), port=6653, log=run / "logs/ctl.log")
    ctl.start()                 # spawn `python -m controllers spray ...`, wait until it listens
    ctl.pre_switch_start(net)   # spray: nftables mark tables on the decision ports
    ...                         # Network starts the switches
    ctl.wait_ready(dpids, 60)   # every switch connected and its rules acknowledged (barrier)
    ctl.post_switch_start(net)  # spray: check the switches use the kernel datapath
    ctl.check_alive()           # any time: RunError if the controller died
    ctl.stop()                  # stop the process, delete the tables it created itself

The controller listens on 127.0.0.1 only.  Its stdout/stderr go to ``log`` (kept); the
status lines (`controllers.base`) go to ``<log>.status.jsonl`` and the layout it routes to
``<log>.layout.json``, both next to the log.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from controllers import layout_for
from controllers.paths import Routes, compute_routes
from controllers.registry import canonical_app
from controllers.rules import nft_table_name, spray_nft_script
from testbed.core.commands import CommandRunner
from testbed.core.errors import RunError, UnsupportedError
from testbed.core.process import Process
from testbed.core.recording import recording

LISTEN_HOST = "127.0.0.1"
REPO_ROOT = Path(__file__).resolve().parents[1]
TCP_LISTEN = "0A"


def controller_argv(python: str, app: str, port: int, layout_file: Path,
                    status_file: Path) -> list[str]:
    """The command line that runs app as a child process.

    python: interpreter; app: registry name; port: OpenFlow port on 127.0.0.1;
    layout_file: layout JSON; status_file: JSON-lines status output.
    """
    return [python, "-m", "controllers", app, "--port", str(port),
            "--layout", str(layout_file), "--status", str(status_file)]


def inactivity_probe_argv(bridges: Sequence[str], probe_ms: int) -> list[str]:
    """One ``ovs-vsctl`` call setting the controller inactivity probe of every bridge.

    bridges: OVS bridge names (each with exactly one controller); probe_ms: milliseconds.
    """
    argv = ["ovs-vsctl", "--timeout=60"]
    for br in bridges:
        argv += ["--", "set", "controller", br, f"inactivity_probe={int(probe_ms)}"]
    return argv


def parse_proc_net_tcp(text: str) -> set[tuple[str, int]]:
    """Listening (address, port) pairs from ``/proc/net/tcp`` text (IPv4, host byte order).

    text: the file's contents.
    """
    out = set()
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != TCP_LISTEN:
            continue
        addr_hex, port_hex = fields[1].split(":")
        raw = bytes.fromhex(addr_hex)[::-1]
        out.add((".".join(str(b) for b in raw), int(port_hex, 16)))
    return out


def is_listening(port: int, host: str = LISTEN_HOST, proc_file: str = "/proc/net/tcp") -> bool:
    """True if something in this network namespace listens on host:port (or 0.0.0.0:port)."""
    try:
        text = Path(proc_file).read_text()
    except OSError:
        return False
    found = parse_proc_net_tcp(text)
    return (host, port) in found or ("0.0.0.0", port) in found


def parse_status(text: str) -> list[dict]:
    """The status lines written by the fabric app (complete JSON lines only)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a line still being written
    return out


def readiness(events: Sequence[dict], dpids: Sequence[int]) -> tuple[dict[int, float], list[dict]]:
    """Which of dpids are programmed, and any errors, from status events.

    events: parsed status lines; dpids: the switches to wait for.
    Returns ({dpid: time ready}, [error events]); a switch that reconnects after being
    ready counts again only once its new rules are acknowledged.
    """
    ready: dict[int, float] = {}
    errors = []
    wanted = set(dpids)
    for ev in events:
        dpid = ev.get("dpid")
        kind = ev.get("event")
        if kind == "error" and (dpid in wanted or dpid is None or ev.get("switch") is None):
            errors.append(ev)
        elif dpid in wanted and kind == "ready":
            ready[dpid] = float(ev["t"])
        elif dpid in wanted and kind in ("programming", "disconnected"):
            ready.pop(dpid, None)
    return ready, errors


class ControllerProcess:
    """A fabric controller app run as a child process, with the `Network` controller hook.

    app: a name of `controllers.registry` (or an alias, such as ``single-path``);
    topo_desc: a `FabricLayout`, a `FatTreeTopo`, ``"fattree,4"`` or a layout dict;
    port: OpenFlow TCP port on 127.0.0.1; log: the controller's log file (default: a new
    temporary directory); runner: the `CommandRunner` used for every command;
    start_timeout: seconds to wait for the controller to listen; stall_s: `wait_ready`
    restarts the controller (at most ``max_restarts`` times) when no switch has been
    programmed for this long while some are missing (see `wait_ready`); inactivity_probe_ms: OVS's
    controller inactivity probe (its 5 s default drops the connection when a loaded machine
    delays an echo reply; None leaves it alone): `testbed.net.network.Network` gives it to the
    switches' controller records at creation, and `post_switch_start` sets it again for a
    network made by other means.
    Raises `InputError` subclasses for an unknown app or a topology it cannot route.
    """

    protocols = "OpenFlow13"

    def __init__(self, app: str, topo_desc: Any, port: int = 6653, log: Path | None = None,
                 *, runner: CommandRunner | None = None, start_timeout: float = 300.0,
                 inactivity_probe_ms: int | None = 30000, stall_s: float = 60.0,
                 max_restarts: int = 2):
        self.app = canonical_app(app)
        self.routes: Routes = compute_routes(layout_for(topo_desc))
        self.port = int(port)
        self.ip = LISTEN_HOST
        if log is None:
            log = Path(tempfile.mkdtemp(prefix="controller-")) / "controller.log"
        self.log = Path(log)
        self.status_file = self.log.with_name(self.log.name + ".status.jsonl")
        self.layout_file = self.log.with_name(self.log.name + ".layout.json")
        self.runner = runner or CommandRunner()
        self.start_timeout = start_timeout
        self.inactivity_probe_ms = inactivity_probe_ms
        self.stall_s, self.max_restarts = stall_s, max_restarts
        self.restarts: list[dict[str, Any]] = []  # stalls `wait_ready` recovered from
        self.proc: Process | None = None
        self._stopped = False
        self.started_at: float | None = None
        self.ready_at: dict[int, float] = {}
        self.own_nft_tables: list[str] = []   # tables this object must delete itself
        self.nft_tables: list[str] = []       # every spray table created for this run
        self.spray_switches: list[str] = []   # switches those tables belong to

    # -- the hook ---------------------------------------------------------------------
    def start(self) -> None:
        """Spawn the controller and wait until it listens on 127.0.0.1:port."""
        if self.proc is not None:
            raise RunError(f"controller {self.app} was already started")
        dry = recording(self.runner)  # a dry run: no socket is looked at, nothing waited for
        if not dry and is_listening(self.port):
            raise RunError(f"port {self.port} on {LISTEN_HOST} is already in use; another "
                           "controller is running (choose another --port)")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.layout_file.write_text(json.dumps(self.routes.layout.to_dict()) + "\n")
        self.status_file.write_text("")
        argv = controller_argv(sys.executable, self.app, self.port, self.layout_file,
                               self.status_file)
        env = _child_env()
        if self.started_at is None:  # a restart keeps the first start (ready_s shows it)
            self.started_at = time.time()
        self.proc = self.runner.spawn(argv, log=self.log, env=env)
        deadline = time.time() + self.start_timeout
        while not dry and not is_listening(self.port):
            self.check_alive()
            if time.time() > deadline:
                self.stop()
                raise RunError(f"controller {self.app} did not listen on {LISTEN_HOST}:"
                               f"{self.port} within {self.start_timeout:g}s; see {self.log}")
            time.sleep(0.1)

    def pre_switch_start(self, net: Any) -> None:
        """Spray: create one nftables netdev table per decision switch (before switches run).

        net: the `Network` (its ``add_nft_table`` records the table for clean-up); an
        object without it gets the tables created here and deleted by `stop`.
        """
        if self.app != "spray":
            return
        scripts = {}
        for sw in self.routes.layout.switches:
            script = spray_nft_script(self.routes, sw.name)
            if script is not None:
                scripts[sw.name] = script
        add_many = getattr(net, "add_nft_tables", None)
        if add_many is not None:  # all tables in one nft call, recorded by the network
            add_many([("netdev", nft_table_name(sw), _table_body(script))
                      for sw, script in scripts.items()])
        else:
            for sw, script in scripts.items():
                name = nft_table_name(sw)
                if self.runner.ok(["nft", "list", "table", "netdev", name], record=False):
                    raise RunError(f"nftables table netdev {name} already exists; it is not "
                                   "ours (delete it by hand if a previous run left it)")
                self.own_nft_tables.append(name)
                self.runner.run(["nft", "-f", "-"], input=script)
        self.nft_tables.extend(nft_table_name(sw) for sw in scripts)
        self.spray_switches.extend(scripts)

    def wait_ready(self, switch_dpids: Sequence[int], timeout: float) -> dict[int, float]:
        """Block until every switch in switch_dpids has connected and acknowledged its rules.

        switch_dpids: DPIDs to wait for (all of them exist in OVS by now); timeout: seconds.
        Returns {dpid: time ready}.  Raises `RunError` if the controller dies, a switch
        rejects a rule, or time runs out.

        Under software emulation the os-ken process was seen to stop handling new
        switches after a few (OVS reports the connections up, the app never sees their
        features reply, no error); the cause is fixed (docs/controllers.md, "Why the
        controller once stalled"), and this stays as a safety net: when no switch has
        been programmed for ``stall_s`` while some are missing, the controller's thread
        stacks go to its log and the process is restarted on the same port (at most
        ``max_restarts`` times, each recorded in ``restarts`` and `describe`); the
        switches reconnect within a second and the new process programs all of them.
        """
        if recording(self.runner):
            return {}
        names = {sw.dpid: sw.name for sw in self.routes.layout.switches}
        unknown = [d for d in switch_dpids if d not in names]
        if unknown:
            raise RunError(f"switches with DPIDs {', '.join(f'{d:016x}' for d in unknown)} are "
                           f"not in the controller's {self.routes.layout.kind} layout")
        deadline = time.time() + timeout
        progress_at, seen = time.time(), -1
        while True:
            self.check_alive()
            events = parse_status(self._read_status())
            ready, errors = readiness(events, switch_dpids)
            if errors:
                raise RunError(f"controller {self.app} reported an error: "
                               f"{errors[0].get('switch') or errors[0].get('dpid')}: "
                               f"{errors[0].get('detail')}; see {self.log}")
            missing = [d for d in switch_dpids if d not in ready]
            if not missing:
                self.ready_at = ready
                return ready
            now = time.time()
            if len(events) != seen:  # any status line (a switch connecting) is progress
                progress_at, seen = now, len(events)
            elif now - progress_at > self.stall_s and len(self.restarts) < self.max_restarts:
                self._restart_stalled([names[d] for d in missing])
                progress_at, seen = time.time(), -1
                # the new process gets its own chance, even when timeout <= stall_s
                deadline = max(deadline, progress_at + self.stall_s)
                continue
            if now > deadline:
                self.dump_threads()
                raise RunError(f"controller {self.app}: {len(missing)} switches not programmed "
                               f"after {timeout:g}s ({', '.join(names[d] for d in missing[:8])})"
                               f"; see {self.log} (it ends with the controller's thread "
                               "stacks)")
            time.sleep(0.1)

    def post_switch_start(self, net: Any) -> None:
        """Relax OVS's inactivity probe; spray: refuse a userspace datapath.

        net: the `Network` (unused: the bridges are the layout's switches).
        """
        if self.inactivity_probe_ms is not None:
            self.runner.run(inactivity_probe_argv([s.name for s in self.routes.layout.switches],
                                                  self.inactivity_probe_ms), timeout=120)
        if self.app != "spray" or not self.spray_switches:
            return
        bridge = self.spray_switches[0]
        res = self.runner.run(["ovs-vsctl", "--timeout=10", "get", "bridge", bridge,
                               "datapath_type"], check=False)
        kind = res.stdout.strip().strip('"')
        if res.returncode == 0 and kind not in ("", "system"):
            raise UnsupportedError(f"spray needs the OVS kernel datapath, but bridge {bridge} "
                                   f"uses {kind!r}; start the network with the kernel datapath")

    def _restart_stalled(self, missing: list[str]) -> None:
        """Record a stall (thread stacks into the log), then restart the process."""
        self.dump_threads()
        self.restarts.append({"t": round(time.time(), 3), "missing": missing})
        print(f"controller {self.app}: no switch programmed for {self.stall_s:g}s with "
              f"{len(missing)} missing ({', '.join(missing[:8])}); its thread stacks are in "
              f"{self.log}; restarting it", file=sys.stderr, flush=True)
        if self.proc is not None:
            self.proc.stop()
        self.proc, self._stopped = None, False
        self.start()

    def dump_threads(self, wait: float = 2.0) -> None:
        """Have the controller write every thread's stack into its log (SIGUSR1), for a
        controller that stopped programming switches without an error."""
        if self.proc is not None and self.proc.send(signal.SIGUSR1):
            time.sleep(wait)

    def check_alive(self) -> None:
        """Raise `RunError` (with the log's tail) if the controller process has died."""
        if self.proc is None:
            raise RunError(f"controller {self.app} was never started")
        if not self.proc.running():
            rc = self.proc.popen.poll()
            raise RunError(f"controller {self.app} died (exit {rc}); log {self.log}: "
                           f"{_tail(self.log)}")

    def stop(self) -> None:
        """Stop the process (by its PID) and delete the nftables tables this object made."""
        errors = []
        for name in list(self.own_nft_tables):
            if self.runner.ok(["nft", "list", "table", "netdev", name], record=False):
                res = self.runner.run(["nft", "delete", "table", "netdev", name], check=False)
                if res.returncode != 0:
                    errors.append(f"nft delete table netdev {name}: {res.stderr.strip()}")
                    continue
            self.own_nft_tables.remove(name)
        if self.proc is not None and not self._stopped:
            self._stopped = True
            self.proc.stop()  # also reaps and forgets a process that already died
        if errors:
            raise RunError("; ".join(errors))

    # -- reporting --------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """What ran, for ``metadata.json``: app, port, files, nft tables, readiness times."""
        t0 = self.started_at
        return {"app": self.app, "listen": f"{LISTEN_HOST}:{self.port}", "log": str(self.log),
                "layout": f"{self.routes.layout.kind},{self.routes.layout.k}",
                "nft_tables": [f"netdev {n}" for n in self.nft_tables],
                "restarts": list(self.restarts),
                "ready_s": ({f"{d:016x}": round(t - t0, 3) for d, t in self.ready_at.items()}
                            if t0 else {})}

    def _read_status(self) -> str:
        try:
            return self.status_file.read_text()
        except OSError:
            return ""


def _table_body(script: str) -> str:
    """The inside of a ``table ... { ... }`` script (for `Network.add_nft_table`)."""
    lines = script.strip().splitlines()
    return "\n".join(lines[1:-1])


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _child_env() -> dict[str, str]:
    """The environment for the controller: ours, with this checkout first on PYTHONPATH."""
    env = dict(os.environ)
    extra = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + extra if extra else "")
    return env
