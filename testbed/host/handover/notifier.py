"""Tell a run's senders that the access link changed (P3's hand-over schemes).

    with HandoverNotifier(runner, [net.host("client")], map_ids, samples_dir) as ho:
        net.play(events, t0, log, after=ho.notify)

At every schedule event that brings a link (back) up or changes its shape, `notify`
(1) bumps the hand-off generation in the program's ``ho_signal`` map (with the
CLOCK_MONOTONIC time), (2) reads ``ho_socks`` for the sockets with data in flight,
(3) has the agent in each sender's namespace (`testbed.host.handover.agent`) send each of
its sockets the restart ICMP (`testbed.host.handover.icmp`) and (4) sets the signal's
time to when the first ICMP went out.  Then (5) a watcher thread follows ``ho_socks`` for
`UNDO_WATCH_S`: a socket whose restart Linux undid (the program publishes
``undone_gen``, see ``ho_undo_cwnd`` in ``bpf/handover.h``) is sent the ICMP once more,
which marks its segments lost again.  Map access is in-process
(`testbed.host.handover.bpfmap`) and the agents are started before the run's clock, so a
hand-off reaches the senders within milliseconds.  Each notification is one line of
``samples/handover-signal.jsonl``::

    {"gen": 1, "t": 1700000003.51, "t_mono_ns": 123, "link": "access",
     "sockets": [{"src": ..., "sport": ..., "seq": ..., "mss": 1448, "mtu": 1480}],
     "sent": {"client": [...]}, "errors": {}}

and each second ICMP one more line, ``{"gen": 1, "undone": {...the socket...}, "t": ...,
"sent": {...}, "errors": {...}}``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from testbed.core.commands import CommandRunner
from testbed.core.errors import CommandError, MissingFeatureError
from testbed.core.process import Process, realtime_priority
from testbed.core.transcript import Namespaced, TranscriptEntry, in_namespace
from testbed.host.handover.bpfmap import BpfMap
from testbed.host.handover.icmp import SockState, decode_sock, signal_value
from testbed.spec.model import ScheduleEvent

READY_TIMEOUT_S = 120.0   # the agent imports scapy: seconds under software emulation
REPLY_TIMEOUT_S = 5.0
# how long after a hand-off an undo of its restart is watched for: the undo comes with the
# restart's first ACK, one round trip of the new path (0.14 s on P3's IMT-2000 link; a
# 3.5 s outage leaves the receiver's ACKs no later)
UNDO_WATCH_S = 3.0
UNDO_POLL_S = 0.005


def is_handoff(event: ScheduleEvent) -> bool:
    """Whether event is an interface change a sender should hear of: the link comes back
    up, or its rate or delay changes (taking it down is not: the sender learns of the new
    interface when it is there)."""
    up = event.link_up  # ``up = true`` and ``down = false`` alike
    return up is not False and (up is True or event.bw is not None
                                or event.delay is not None)


def in_flight(socks: Any) -> list[SockState]:
    """The sockets in ``ho_socks`` (anything with ``keys`` and ``lookup``) that have data
    in flight, as the program last published them."""
    out = []
    for key in list(socks.keys()):
        value = socks.lookup(key)
        if value is not None:
            st = decode_sock(key, value)
            if st.in_flight:
                out.append(st)
    return out


def _id(st: SockState) -> tuple[str, int, str, int]:
    return st.saddr, st.sport, st.daddr, st.dport


def undone_restarts(socks: Any, gen: int, done: set[tuple[str, int, str, int]]
                    ) -> list[SockState]:
    """The sockets in ``ho_socks`` whose restart of hand-off gen Linux undid, that still
    have data in flight and are not in done."""
    return [st for st in in_flight(socks)
            if st.undone_gen == gen & 0xFFFFFFFF and _id(st) not in done]


def _outcome(replies: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"sent": {h: r.get("sent", []) for h, r in replies.items()},
            "errors": {h: r["error"] for h, r in replies.items() if "error" in r}}


class _Agent:
    """One agent process and its pipes."""

    def __init__(self, runner: CommandRunner, host: Namespaced):
        self.name = host.name
        argv = in_namespace([sys.executable, "-m", "testbed.host.handover.agent"], host)
        try:
            self.popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, text=True, bufsize=1,
                                          start_new_session=True)
        except FileNotFoundError as exc:
            raise MissingFeatureError(f"'{argv[0]}' is not installed") from exc
        self.proc = Process(self.popen, argv, host.name, runner, None)
        runner.track(self.proc)
        runner.transcript.add(TranscriptEntry(time.time(), argv, host.name, None, 0.0,
                                              kind="spawn"))

    def reply(self, timeout: float) -> dict[str, Any]:
        """The agent's next line (an error record when it says nothing in time)."""
        assert self.popen.stdout is not None
        ready, _, _ = select.select([self.popen.stdout], [], [], timeout)
        if not ready:
            return {"error": f"no answer within {timeout:g} s"}
        line = self.popen.stdout.readline()
        if not line:
            return {"error": "the agent exited"}
        try:
            return json.loads(line)
        except ValueError:
            return {"error": f"unreadable answer {line[:80]!r}"}

    def ask(self, line: str) -> dict[str, Any]:
        assert self.popen.stdin is not None
        try:
            self.popen.stdin.write(line + "\n")
        except OSError as exc:
            return {"error": f"the agent is gone: {exc}"}
        return self.reply(REPLY_TIMEOUT_S)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.popen.stdin is not None:
                self.popen.stdin.write("quit\n")
                self.popen.stdin.close()
        self.proc.stop()


class HandoverNotifier:
    """Hand-off notification for one run.

    runner: the run's command runner; hosts: the sending hosts; map_ids: the program's
    map ids by name (``ho_signal``, ``ho_socks``); samples_dir: where
    ``handover-signal.jsonl`` goes.
    """

    def __init__(self, runner: CommandRunner, hosts: Sequence[Namespaced],
                 map_ids: dict[str, int], samples_dir: Path):
        self.runner = runner
        self.hosts = list(hosts)
        self.map_ids = map_ids
        self.log = samples_dir / "handover-signal.jsonl"
        self.gen = 0
        self.records: list[dict[str, Any]] = []
        self._maps: dict[str, BpfMap] = {}
        self._agents: list[_Agent] = []
        self._lock = threading.Lock()   # the agents' pipes, the records and the log
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._closed = False

    def __enter__(self) -> HandoverNotifier:
        return self.start()

    def start(self) -> HandoverNotifier:
        """Open the maps and start the agents (all closed again if one fails)."""
        try:
            for name in ("ho_signal", "ho_socks"):
                if name not in self.map_ids:
                    raise MissingFeatureError(f"the hand-over program has no map {name!r}")
                self._maps[name] = BpfMap.open(self.map_ids[name])
            self._agents = [_Agent(self.runner, h) for h in self.hosts]
            for agent in self._agents:
                first = agent.reply(READY_TIMEOUT_S)
                if not first.get("ready"):
                    raise CommandError(agent.proc.argv, 1, "",
                                       f"hand-over agent in {agent.name}: "
                                       f"{first.get('error', first)}")
                # asked from the schedule's real-time thread the moment the link is
                # back, it must not then wait behind the traffic for a CPU (it sleeps
                # until asked; its start-up ran at the normal priority)
                realtime_priority(agent.popen.pid)
        except BaseException:
            self.close()
            raise
        return self

    def notify(self, event: ScheduleEvent) -> None:
        """Signal a hand-off if event is one (`is_handoff`); never raises for the agents'
        failures (they are logged)."""
        # any event ends the watch for the previous hand-off's undo (an outage that
        # follows must not see a second ICMP; the next hand-off restarts anew)
        self._stop_watching()
        if self._closed or not is_handoff(event):  # closed: the run has ended
            return
        self.gen += 1
        t_mono = time.monotonic_ns()
        self._maps["ho_signal"].update(b"\0\0\0\0", signal_value(self.gen, t_mono))
        states = in_flight(self._maps["ho_socks"])
        replies = self._send(states)
        # the restart's time is when the first ICMP went out: a socket that was already
        # in loss recovery takes it from here on its first ACK (bpf/handover.h)
        sent_at = [int(r["t_mono_ns"]) for rep in replies.values()
                   for r in rep.get("sent", []) if "t_mono_ns" in r]
        if sent_at:
            self._maps["ho_signal"].update(b"\0\0\0\0", signal_value(self.gen, min(sent_at)))
        self._record({"gen": self.gen, "t": time.time(), "t_mono_ns": t_mono,
                      "link": event.link, "sockets": [s.as_record() for s in states],
                      **_outcome(replies)})
        if states and not self._closed:
            self._stop.clear()
            signalled = {_id(st) for st in states}
            self._watcher = threading.Thread(target=self._watch_undo,
                                             args=(self.gen, signalled),
                                             name="handover-undo", daemon=True)
            self._watcher.start()

    def _send(self, states: list[SockState]) -> dict[str, dict[str, Any]]:
        """Each agent's reply to sending states their restart ICMP."""
        payload = json.dumps([dataclasses.asdict(s) for s in states])
        with self._lock:
            return {a.name: a.ask(f"send {payload}") for a in self._agents}

    def _record(self, rec: dict[str, Any]) -> None:
        with self._lock:
            self.records.append(rec)
            self.log.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log, "a") as f:
                f.write(json.dumps(rec) + "\n")

    def _watch_undo(self, gen: int, signalled: set[tuple[str, int, str, int]]) -> None:
        """Send the restart ICMP once more to each socket whose restart of hand-off gen
        Linux undid (`undone_restarts`), for `UNDO_WATCH_S`, until every signalled
        socket had its second ICMP, or until stopped."""
        done: set[tuple[str, int, str, int]] = set()
        until = time.monotonic() + UNDO_WATCH_S
        while not self._stop.wait(UNDO_POLL_S) and time.monotonic() < until and \
                not signalled <= done:
            try:
                states = undone_restarts(self._maps["ho_socks"], gen, done)
                for st in states:
                    if self._stop.is_set():
                        return
                    done.add(_id(st))
                    self._record({"gen": gen, "undone": st.as_record(), "t": time.time(),
                                  **_outcome(self._send([st]))})
            except (OSError, KeyError, ValueError):  # the maps or pipes closed: run over
                return

    def _stop_watching(self) -> None:
        self._stop.set()
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.join()

    def close(self) -> None:
        """Stop the watcher and the agents and close the maps (idempotent)."""
        self._closed = True
        self._stop_watching()
        for agent in self._agents:
            agent.stop()
        self._agents = []
        for m in self._maps.values():
            m.close()
        self._maps = {}

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
