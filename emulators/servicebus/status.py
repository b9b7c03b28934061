"""`--status-port`: the queues' runtime counts as JSON over loopback HTTP, for tests and benches.

`GET /counts` answers `{"queue-name": {"active_message_count": 3, "scheduled_message_count": 1,
"dead_letter_message_count": 0, "locked_message_count": 1, "deferred_message_count": 0,
"total_message_count": 4}, ...}`. The HTTP server runs in its own thread; the counts are read on the
broker's event thread (an injected event), so they are a consistent snapshot.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger(__name__)

COUNTS_EVENT = "counts_request"
ANSWER_TIMEOUT_S = 10.0


class CountsRequest:
    """One `GET /counts` waiting for the event thread's answer."""

    def __init__(self) -> None:
        self.answer: dict[str, dict[str, int]] | None = None
        self.done = threading.Event()


class StatusServer:
    """A loopback HTTP server whose `/counts` asks the event loop through `ask` and waits for the answer."""

    def __init__(self, host: str, port: int, ask: Callable[[CountsRequest], None]) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.rstrip("/") != "/counts":
                    self.send_error(404, "only /counts is served")
                    return
                body = server.counts()
                if body is None:
                    self.send_error(503, "the broker did not answer in time")
                    return
                data = json.dumps(body, sort_keys=True).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("status: %s", format % args)

        self._ask = ask
        self._http = ThreadingHTTPServer((host, port), Handler)
        self._thread = threading.Thread(target=self._http.serve_forever, name="status-http", daemon=True)

    def counts(self) -> dict[str, dict[str, int]] | None:
        request = CountsRequest()
        self._ask(request)
        return request.answer if request.done.wait(ANSWER_TIMEOUT_S) else None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
