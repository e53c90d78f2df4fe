"""The os-ken application shared by every fabric policy; its handlers stay thin.

On a switch's features reply the app looks the DPID up in the layout, asks the pure policy
function (`controllers.rules`) for the switch's rules, sends them, then a barrier request.
When the barrier reply comes back every rule is in place, and the app appends a line to the
status file (JSON lines) that `ControllerProcess.wait_ready` polls::

    {"t": 1700000000.1, "event": "ready", "dpid": 65536, "switch": "E0", "messages": 52}
    {"t": ..., "event": "error", "dpid": 65536, "switch": "E0", "detail": "..."}
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from os_ken.ofproto import ofproto_v1_3

from controllers.ofmsg import rule_messages
from controllers.paths import Routes
from controllers.rules import POLICIES


def missing_ports(expected: Iterable[int], reported: Iterable[int]) -> list[int]:
    """Layout ports that the switch did not report (sorted).

    expected: port numbers the layout uses on the switch; reported: the switch's ports.
    """
    return sorted(set(expected) - set(reported))


@dataclass(frozen=True)
class FabricContext:
    """What the launcher hands every fabric app.

    routes: equal-cost next hops of the layout; status_file: JSON-lines status output
    (None: log only).
    """

    routes: Routes
    status_file: Path | None = None


class FabricApp(app_manager.OSKenApp):
    """Installs one policy's rules proactively on every switch of the layout.

    Subclasses set ``POLICY`` (a key of `controllers.rules.POLICIES`).
    fabric: the `FabricContext` (passed by the launcher as a keyword argument).
    """

    OFP_VERSIONS: ClassVar[list[int]] = [ofproto_v1_3.OFP_VERSION]
    POLICY: ClassVar[str] = ""

    def __init__(self, *args: Any, fabric: FabricContext, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fabric = fabric
        self.policy = POLICIES[self.POLICY]
        self.switches = fabric.routes.layout.by_dpid()
        self.pending: dict[int, tuple[int, int]] = {}  # dpid -> (barrier xid, messages sent)
        self.ports_seen: dict[int, set[int]] = {}  # dpid -> ports in port-desc replies so far
        self.programmed: set[int] = set()  # switches this process has programmed before

    def report(self, event: str, dpid: int, **fields: Any) -> None:
        """Append one status line (and log it)."""
        sw = self.switches.get(dpid)
        line = {"t": time.time(), "event": event, "dpid": dpid,
                "switch": sw.name if sw else None, **fields}
        self.logger.info("%s", json.dumps(line))
        if self.fabric.status_file is not None:
            with open(self.fabric.status_file, "a") as fh:
                fh.write(json.dumps(line) + "\n")

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_switch_features(self, ev: Any) -> None:
        """A switch connected: send its whole rule set, then a barrier.

        The first time, the switch is wiped first (it may hold another app's rules); on a
        reconnect (e.g. OVS's inactivity probe timed out on a loaded machine) the same
        rules are re-sent without the wipe, so traffic keeps flowing.
        """
        dp = ev.msg.datapath
        # The DPID comes from the message, not from ``dp.id``: os-ken's receive thread
        # queues this event before its own handler sets ``dp.id``, and with the native hub
        # this thread may run first and see None (see docs/controllers.md).
        dpid = ev.msg.datapath_id
        sw = self.switches.get(dpid)
        if sw is None:
            self.report("error", dpid, detail=f"DPID {dpid:016x} is not in the layout")
            return
        refresh = dpid in self.programmed
        msgs = rule_messages(dp, self.policy(self.fabric.routes, sw.name), refresh=refresh)
        for msg in msgs:
            dp.send_msg(msg)
        barrier = dp.ofproto_parser.OFPBarrierRequest(dp)
        dp.send_msg(barrier)
        self.programmed.add(dpid)
        self.pending[dpid] = (barrier.xid, len(msgs))
        self.report("programming", dpid, messages=len(msgs), refresh=refresh)

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def on_port_desc(self, ev: Any) -> None:
        """Check that the switch has every port the layout wires (catches miswiring)."""
        dp = ev.msg.datapath
        sw = self.switches.get(dp.id)
        if sw is None:
            return
        seen = self.ports_seen.setdefault(dp.id, set())
        seen.update(p.port_no for p in ev.msg.body)
        if ev.msg.flags & dp.ofproto.OFPMPF_REPLY_MORE:
            return
        del self.ports_seen[dp.id]
        missing = missing_ports(self.fabric.routes.adj.ports[sw.name], seen)
        if missing:
            self.report("error", dp.id, detail=f"switch lacks layout ports {missing}")

    @set_ev_cls(ofp_event.EventOFPBarrierReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def on_barrier_reply(self, ev: Any) -> None:
        """The switch processed everything sent before the barrier: it is ready."""
        dp = ev.msg.datapath
        xid, count = self.pending.get(dp.id, (None, 0))
        if xid is not None and ev.msg.xid == xid:
            del self.pending[dp.id]
            self.report("ready", dp.id, messages=count)

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def on_error(self, ev: Any) -> None:
        """A switch rejected a message: report it so the run fails loudly."""
        msg = ev.msg
        self.report("error", msg.datapath.id,
                    detail=f"OpenFlow error type={msg.type} code={msg.code} xid={msg.xid}")

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def on_disconnect(self, ev: Any) -> None:
        """A switch disconnected (normal at the end of a run)."""
        dp = ev.datapath
        if dp.id is not None:
            self.pending.pop(dp.id, None)
            self.report("disconnected", dp.id)
