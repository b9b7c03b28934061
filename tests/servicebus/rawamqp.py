"""A hand-driven AMQP client (proton's engine over a plain socket) for what the SDK never does on purpose:
stopping in the middle of a transfer, dropping the socket, or writing malformed frames.

It is a real AMQP peer, not a fake broker: it speaks SASL ANONYMOUS, puts a real token on $cbs and attaches
real links, so the broker sees exactly what a misbehaving client would send.
"""

from __future__ import annotations

import select
import socket
import struct
import time
import uuid
from collections.abc import Callable

from proton import Collector, Connection, Endpoint, Message, Receiver, Sender, Transport

from devstack.broker import KEY, KEY_NAME
from emulators.servicebus.cbs import sign_sas_token

TIMEOUT_S = 5.0


class RawClient:
    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
        self.transport = Transport()
        self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.connection = Connection()
        self.connection.collect(Collector())
        self.connection.container = "raw-" + uuid.uuid4().hex[:8]
        self.connection.hostname = "localhost"
        self.transport.bind(self.connection)
        self.connection.open()
        self.session = self.connection.session()
        self.session.open()
        self.closed_by_peer = False

    # --- the I/O loop ----------------------------------------------------------------------------

    def pump(self, until: Callable[[], bool] = lambda: False, timeout_s: float = TIMEOUT_S) -> bool:
        """Move bytes both ways until `until()` holds (True) or time runs out or the peer closes (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._flush()
            if until():
                return True
            if self.closed_by_peer:
                return False
            readable, _, _ = select.select([self.sock], [], [], 0.05)
            if readable:
                self._read()
        return until()

    def _flush(self) -> None:
        while not self.closed_by_peer:
            pending = self.transport.pending()
            if pending <= 0:
                return
            try:
                self.sock.sendall(self.transport.peek(pending))
            except OSError:
                self.closed_by_peer = True
                return
            self.transport.pop(pending)

    def _read(self) -> None:
        try:
            data = self.sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self.closed_by_peer = True
            self.transport.close_tail()
            return
        self.transport.push(data)

    def wait_closed_by_peer(self, timeout_s: float = TIMEOUT_S) -> bool:
        """True once the broker has closed this socket."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.closed_by_peer:
            readable, _, _ = select.select([self.sock], [], [], 0.05)
            if readable:
                try:
                    data = self.sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    self.closed_by_peer = True
        return self.closed_by_peer

    # --- AMQP steps --------------------------------------------------------------------------------

    def put_token(self, entity: str) -> None:
        audience = f"sb://localhost:{self.port}/{entity}"
        requests = self.session.sender("cbs-requests-" + uuid.uuid4().hex[:6])
        requests.target.address = "$cbs"
        replies = self.session.receiver("cbs-replies-" + uuid.uuid4().hex[:6])
        replies.source.address = "$cbs"
        requests.open()
        replies.open()
        replies.flow(1)
        assert self.pump(lambda: requests.credit > 0), "no credit on $cbs"
        token = sign_sas_token(audience, KEY_NAME, KEY, int(time.time()) + 3600)
        request = Message(
            id=uuid.uuid4(),
            body=token,
            properties={"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": audience},
        )
        requests.delivery(b"t")
        requests.send(request.encode())
        requests.advance()
        assert self.pump(lambda: replies.queued > 0), "no $cbs reply"

    def sender(self, address: str) -> Sender:
        link = self.session.sender("raw-sender-" + uuid.uuid4().hex[:6])
        link.target.address = address
        link.source.address = link.name
        link.open()
        assert self.pump(lambda: link.credit > 0), f"no credit from {address}"
        return link

    def receiver(self, address: str) -> Receiver:
        link = self.session.receiver("raw-receiver-" + uuid.uuid4().hex[:6])
        link.source.address = address
        link.target.address = link.name
        link.open()
        assert self.pump(lambda: bool(link.state & Endpoint.REMOTE_ACTIVE)), f"no attach from {address}"
        return link

    def send_part_of(self, link: Sender, payload: bytes) -> None:
        """Start a delivery and send these bytes without finishing it (the transfer says `more`)."""
        link.delivery(b"partial")
        link.send(payload)
        self._flush()

    def write_raw(self, data: bytes) -> None:
        """Bytes straight onto the socket, past proton: the broker sees whatever this is."""
        self._flush()
        self.sock.sendall(data)

    def drop(self) -> None:
        """Vanish: reset the socket without any AMQP close."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


def raw_frame(body: bytes, frame_type: int = 0, channel: int = 0) -> bytes:
    """One AMQP frame: 8-byte header (size, data offset 2, type, channel) then the body."""
    return struct.pack(">IBBH", 8 + len(body), 2, frame_type, channel) + body
