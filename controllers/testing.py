"""A fake OpenFlow 1.3 switch, for tests and benchmarks of the real controller process.

`FakeSwitch` is a thread that connects to a controller on 127.0.0.1, says hello and
answers what the fabric apps ask (features, the port list, barriers, echoes), counting the
flow-mods, group-mods and barrier requests it gets.  No root and no Open vSwitch needed:
``tests/unit/test_controllers_launcher.py`` and ``benchmarks/controller_race.py`` drive
`controllers.launcher.ControllerProcess` with it.
"""

from __future__ import annotations

import socket
import struct
import threading

OFP_HEADER = struct.Struct("!BBHI")
HELLO, ECHO_REQ, ECHO_REP, FEATURES_REQ, FEATURES_REP = 0, 2, 3, 5, 6
FLOW_MOD, GROUP_MOD, MP_REQ, MP_REP, BARRIER_REQ, BARRIER_REP = 14, 15, 18, 19, 20, 21
PORT_DESC = 13  # the multipart type of the port list


class FakeSwitch(threading.Thread):
    """Connects to the controller, answers the handshake, counts rules, acks barriers.

    port: the controller's port on 127.0.0.1; dpid: the switch's DPID; ports: the port
    numbers it reports; timeout: seconds for the connection and for each receive (an idle
    switch leaves after it).  ``counts``: messages received by type; ``error``: why the
    connection could not be made (None once it was).
    """

    def __init__(self, port: int, dpid: int, ports: list[int], timeout: float = 30.0):
        super().__init__(daemon=True)
        self.port, self.dpid, self.ports, self.timeout = port, dpid, ports, timeout
        self.counts = {FLOW_MOD: 0, GROUP_MOD: 0, BARRIER_REQ: 0}
        self.sock: socket.socket | None = None
        self.error: OSError | None = None

    def send(self, type_: int, xid: int, body: bytes = b"") -> None:
        """Send one OpenFlow 1.3 message."""
        assert self.sock is not None
        self.sock.sendall(OFP_HEADER.pack(4, type_, 8 + len(body), xid) + body)

    def recv_exact(self, n: int) -> bytes:
        """n bytes from the controller; ConnectionError when it closed the connection."""
        assert self.sock is not None
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError
            buf += chunk
        return buf

    def reply(self, type_: int, xid: int, body: bytes) -> None:
        """Answer one message of the controller (the others need no answer)."""
        if type_ == FEATURES_REQ:
            self.send(FEATURES_REP, xid, struct.pack("!QIBB2xII", self.dpid, 0, 254, 0, 0, 0))
        elif type_ == MP_REQ and struct.unpack_from("!H", body)[0] == PORT_DESC:
            ports = b"".join(struct.pack("!I4x6s2x16sIIIIIIII", n, b"\0" * 6, f"p{n}".encode(),
                                         0, 0, 0, 0, 0, 0, 0, 0) for n in self.ports)
            self.send(MP_REP, xid, struct.pack("!HH4x", PORT_DESC, 0) + ports)
        elif type_ == BARRIER_REQ:
            self.send(BARRIER_REP, xid)
        elif type_ == ECHO_REQ:
            self.send(ECHO_REP, xid, body)

    def run(self) -> None:
        try:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout)
        except OSError as exc:
            self.error = exc
            return
        self.serve()

    def serve(self) -> None:
        """Say hello on the connected socket, then answer until the connection ends."""
        try:
            self.send(HELLO, 1)
            while True:
                _v, type_, length, xid = OFP_HEADER.unpack(self.recv_exact(8))
                body = self.recv_exact(length - 8)
                if type_ in self.counts:
                    self.counts[type_] += 1
                self.reply(type_, xid, body)
        except (ConnectionError, OSError):
            return

    def close(self) -> None:
        """Close the connection (the thread then ends)."""
        if self.sock is not None:
            self.sock.close()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
