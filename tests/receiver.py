"""A webhook receiver for the tests: a small HTTP server on 127.0.0.1 that answers a scripted sequence of
statuses and checks every notice's signature with the `standardwebhooks` package, as a user's receiver would."""

from __future__ import annotations

import base64
import json
import random
import secrets
import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    verified: bool
    answered: int

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    secret: str
    statuses: list[int]  # answered in turn; the last one from then on
    port: int = 0
    got: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: int = 0
    most_in_flight: int = 0  # POSTs being answered at once, at most
    release: threading.Event = field(default_factory=threading.Event)  # a held receiver answers once it is set

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def count(self) -> int:
        with self.lock:
            return len(self.got)

    def take(self, path: str, headers: dict[str, str], body: bytes) -> int:
        try:
            Webhook(self.secret).verify(body, headers)
            verified = True
        except WebhookVerificationError:
            verified = False
        with self.lock:
            status = self.statuses[min(len(self.got), len(self.statuses) - 1)]
            self.got.append(Received(path, headers, body, verified, status))
        return status


# Below Linux's ephemeral range (32768-60999): no port the OS hands to a bind(0) (Azurite's, the broker's, the
# hosts' of every xdist worker) can take it between the moment a module names it and the moment it listens.
QUIET_PORTS = range(20_000, 32_000)


def quiet_port() -> int:
    """A port to name in a setting long before a receiver listens on it (a callback allow list is fixed when its
    host starts): one no ephemeral bind can take, free now."""
    while True:
        port = random.randrange(QUIET_PORTS.start, QUIET_PORTS.stop)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


@contextmanager
def receiving(
    secret: str, statuses: Sequence[int] = (200,), *, port: int = 0, hold: bool = False, answer: bytes = b"ok"
) -> Iterator[Receiver]:
    """A receiver on `port` (0: any free one); with `hold`, each POST waits to be answered until `release` is set
    (a receiver slower than the app's timeout); `answer` is the body of every answer."""
    receiver = Receiver(secret, list(statuses))
    if not hold:
        receiver.release.set()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            with receiver.lock:
                receiver.in_flight += 1
                receiver.most_in_flight = max(receiver.most_in_flight, receiver.in_flight)
            try:
                status = receiver.take(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                receiver.release.wait(60)
                self.send_response(status)
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
            except OSError:
                pass  # the app gave up on this attempt (its timeout) and closed the connection
            finally:
                with receiver.lock:
                    receiver.in_flight -= 1

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="webhook receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.release.set()
        server.shutdown()
        server.server_close()
