"""Azure Storage queues and blobs in memory, behind an azure-core async transport.

The app's real storage clients (the SDK's aio `QueueServiceClient` and `BlobServiceClient`, with the app's
retry options and its transaction counter) run unchanged over `SimTransport`: it answers the REST operations
the app uses from an in-memory account, on the simulated clock, with the answers the service gives, failures
included (status, `x-ms-error-code`, the error body), so the SDK's own error mapping and the app's translation
(`shared.store.storage.translated`) run as in production. `tests/sim/test_conformance_storage.py` runs the
same checks against this and against Azurite.

Modelled: queues (create, metadata, approximate count, list with prefix, metadata and markers; put with
visibility and TTL; get with visibility timeout, pop receipts and dequeue counts; peek; update with content
and visibility; delete by pop receipt), containers (create), block blobs as single puts (If-Match,
If-None-Match: *, metadata, content type and encoding, ETags, whole-second Last-Modified), ranged get, get
properties, set metadata, delete, list with prefix, metadata and markers, and leases (acquire with duration or
infinite, renew, release, break, change; expiry on the world's clock; writes to a leased blob need its id).

Not modelled: anything the app does not call (block lists, append/page blobs, snapshots, versions, SAS,
CORS, service properties, queue ACLs, message TTL expiry other than "never"), the service's throttling
(503 ServerBusy at scalability targets appears only as an injected fault), the 64 KiB message limit
(checked at intake by the app itself), and exact error message texts (codes and statuses are modelled).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.core.pipeline.transport import AsyncHttpResponse, AsyncHttpTransport
from azure.core.utils import CaseInsensitiveDict

from sim.storage import charges
from sim.storage.account import ACCOUNT, QUEUE_PORT, Fault, Reply
from sim.storage.blobs import BlobOps
from sim.storage.queues import QueueOps

READS = frozenset({"GetMessages", "PeekMessages", "GetQueueMetadata"})
LATE_S = (5.0, 15.0)  # how late a "late" fault's answer comes: past the ended listings' 5 s freshness


class StorageServer(QueueOps, BlobOps):
    """The REST operations the app uses, against one `Account`, on the clock `now()` (epoch seconds)."""

    def handle(self, method: str, url: str, headers: CaseInsensitiveDict, body: bytes) -> tuple[str, Reply]:
        """The operation's name (for faults and counting) and its answer."""
        port, named, asked = _route(url)
        parts, query = list(named), dict(asked)
        if port == QUEUE_PORT:
            operation, reply = self._queue_op(method, parts, query, headers, body)
            if operation in READS and reply.status < 300 and self.observe is not None:
                self.observe("QueueRead", self.caller, parts[0])  # a look at the queue (`sim.checks.invariants.Looks`)
            return operation, reply
        return self._blob_op(method, parts, query, headers, body)


class SimResponse(AsyncHttpResponse):
    def __init__(self, request: Any, reply: Reply) -> None:
        super().__init__(request, None)
        self.status_code = reply.status
        self.headers = CaseInsensitiveDict({"x-ms-request-id": "sim", "x-ms-version": "2025-01-05", **reply.headers})
        if "Content-Length" not in self.headers:
            self.headers["Content-Length"] = str(len(reply.body))
        self.reason = "OK" if reply.status < 400 else "Error"
        self.content_type = self.headers.get("Content-Type")
        self._content = reply.body

    def body(self) -> bytes:
        return self._content

    async def load_body(self) -> None:
        return None

    async def read(self) -> bytes:
        return self._content

    @property
    def content(self) -> bytes:
        return self._content

    def stream_download(self, pipeline: Any, **kwargs: Any) -> AsyncIterator[bytes]:
        return _Stream(self, self._content)


class _Stream:
    """The body as the SDK's stream download generator gives it (it sets attributes on it)."""

    def __init__(self, response: SimResponse, data: bytes) -> None:
        self.response, self.request, self._left = response, response.request, [data] if data else []
        self.content_length = len(data)

    def __len__(self) -> int:
        return self.content_length

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> bytes:
        if not self._left:
            raise StopAsyncIteration
        return self._left.pop()


@dataclass
class StorageWeather:
    """What storage does to requests right now: faults by operation, and the latency of an answer."""

    rng: random.Random
    latency_s: tuple[float, float] = (0.001, 0.02)
    fault: Fault = field(default=lambda operation: None)
    served: Callable[[str], None] = field(default=lambda operation: None)  # each operation served, by name

    def delay(self) -> float:
        low, high = self.latency_s
        return self.rng.uniform(low, high)


class SimTransport(AsyncHttpTransport):  # type: ignore[type-arg]
    """Every request of an instance's storage clients goes to the world's `StorageServer`, after a seeded
    latency; faults answer 503, time out, answer seconds late ("slow": before the request is served; "late":
    after it), or lose the answer of an applied request. Each request served is added to the cost of the caller
    operation that made it (`sim.storage.charges`)."""

    def __init__(
        self,
        server: StorageServer,
        weather: StorageWeather,
        *,
        name: str | None = None,
        alive: Callable[[], bool] = lambda: True,
    ) -> None:
        self.server, self.weather, self.name, self.alive = server, weather, name, alive

    async def __aenter__(self) -> SimTransport:
        return self

    async def __aexit__(self, *args: Any) -> None:
        return None

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def sleep(self, duration: float) -> None:
        await asyncio.sleep(duration)

    async def send(self, request: Any, **kwargs: Any) -> SimResponse:
        await asyncio.sleep(self.weather.delay())
        if not self.alive():
            raise asyncio.CancelledError  # its process is gone: nothing it sends arrives
        body = _body(request)
        given = request.headers  # read, never changed, by the server: copied only if not case-insensitive already
        headers = given if isinstance(given, CaseInsensitiveDict) else CaseInsensitiveDict(dict(given))
        probe = _operation_name(request.method, request.url)
        fault = self.weather.fault(probe)
        if fault == "timeout":
            await asyncio.sleep(10.0)
            raise ServiceRequestError("simulated: the request timed out")
        if fault == "slow":  # answered, seconds late (the SDK's retries, a throttled partition)
            await asyncio.sleep(self.weather.rng.uniform(1.0, 8.0))
        if fault == "5xx":
            reply = Reply(
                503,
                {"x-ms-error-code": "ServerBusy", "Content-Type": "application/xml"},
                b'<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code>'
                b"<Message>simulated outage</Message></Error>",
            )
            return SimResponse(request, reply)
        self.server.caller = self.name
        try:
            operation, reply = self.server.handle(request.method, request.url, headers, body)
        finally:
            self.server.caller = None
        self.weather.served(operation)
        charges.spent(operation, request.url, reply)
        await asyncio.sleep(self.weather.delay())
        if fault == "late":  # served now, answered seconds later (a listing's later pages, a slow connection)
            await asyncio.sleep(self.weather.rng.uniform(*LATE_S))
        if fault == "lost":
            raise ServiceResponseError("simulated: the connection closed before the answer")
        return SimResponse(request, reply)


def _body(request: Any) -> bytes:
    data = getattr(request, "body", None)
    if data is None:
        data = getattr(request, "content", None)
    if data is None:
        return b""
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, bytes | bytearray):
        return bytes(data)
    return b""


@lru_cache(maxsize=4096)
def _route(url: str) -> tuple[int | None, tuple[str, ...], tuple[tuple[str, str], ...]]:
    """A request's port, path parts after the account, and query (first values), as `StorageServer.handle`
    reads them (a pure function of the URL, kept: the SDK sends the same URLs again and again)."""
    parsed = urlparse(url)
    parts = [unquote(p) for p in parsed.path.split("/")[1:]]
    if parts and parts[0] == ACCOUNT:
        parts = parts[1:]
    parts = [p for p in parts if p != ""] if len(parts) <= 1 else parts
    query = {k: v[0] for k, v in parse_qs(parsed.query, keep_blank_values=True).items()}
    return parsed.port, tuple(parts), tuple(query.items())


@lru_cache(maxsize=4096)
def _operation_name(method: str, url: str) -> str:
    """What a fault span's `op` is matched against (as a prefix): "queue DELETE work-0", "blob PUT results/..." (the
    kind, the method, and the queue or the container and blob the request names: "queue DELETE" is every queue's
    deletes, "blob GET state/poison/" every read of a poison index entry), and a blob listing as "blob LIST
    {prefix}" ("blob LIST ended/" names every listing of the ended markers)."""
    parsed = urlparse(url)
    parts = [unquote(p) for p in parsed.path.split("/")[1:] if p]
    if parts and parts[0] == ACCOUNT:
        parts = parts[1:]
    named = parts[0] if parts else ""
    if parsed.port == QUEUE_PORT:
        return f"queue {method} {named}"
    query = parse_qs(parsed.query)
    if method == "GET" and query.get("comp") == ["list"]:
        return f"blob LIST {query.get('prefix', [''])[0]}"
    return f"blob {method} {'/'.join(parts)}"
