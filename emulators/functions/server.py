"""The HTTP server under the host: aiohttp, with Kestrel's answer to a request it cannot parse.

aiohttp answers a malformed request (bare-LF line endings, a control character in a header, a broken request
line) with a 400 whose text quotes the offending line, and logs it with a traceback; that line may carry a
function key (`x-functions-key`, `?code=`). Kestrel, under the real host, answers such a request with an
empty 400 and closes the connection. This does the same, and logs one line that quotes nothing of the request.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web, web_protocol, web_server
from aiohttp.http_exceptions import HttpProcessingError

log = logging.getLogger(__name__)


class KestrelErrors(web_protocol.RequestHandler):
    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status == 400 or isinstance(exc, HttpProcessingError):
            # The exception's text holds the raw line: name its kind only.
            log.warning("Bad request from %s: %s (the request is not quoted)", request.remote, type(exc).__name__)
            response = web.Response(status=400)
            response.force_close()
            return response
        return super().handle_error(request, status, exc, message)


class HostServer(web_server.Server):
    def __call__(self) -> web_protocol.RequestHandler:
        return KestrelErrors(self, loop=self._loop, **self._kwargs)


class HostRunner(web.AppRunner):
    """`web.AppRunner` whose connections are handled by `KestrelErrors`."""

    async def _make_server(self) -> web_server.Server:
        server = await super()._make_server()
        server.__class__ = HostServer  # the same object, handing out the handler above
        return server
