"""A webhook receiver for the tests: a small HTTP server on 127.0.0.1 that answers a scripted sequence of
statuses and checks every notice's signature with the `standardwebhooks` package, as a user's receiver would."""

from __future__ import annotations

import base64
import json
import secrets
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


@contextmanager
def receiving(secret: str, statuses: Sequence[int] = (200,)) -> Iterator[Receiver]:
    receiver = Receiver(secret, list(statuses))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            status = receiver.take(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            self.send_response(status)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="webhook receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
