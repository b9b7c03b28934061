"""Count storage transactions inside the app, by operation, so cost is measured, not estimated.

`TransactionCounter` is an azure-core pipeline policy. It sits after the SDK's retry policy, so
every try is counted, as Azure bills it. Counts go to a process-wide total and, when a drain
session (or any caller) opened a `Tally` in its context, to that tally as well. Requests made inside
`reading()` (the HTTP API's read routes) are also totalled apart, so looking does not pass for working.
"""

from __future__ import annotations

import contextvars
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit

from azure.core.pipeline import PipelineRequest
from azure.core.pipeline.policies import SansIOHTTPPolicy

_session: contextvars.ContextVar[Counter[str] | None] = contextvars.ContextVar("queue_drain_tally", default=None)
_reading: contextvars.ContextVar[bool] = contextvars.ContextVar("queue_drain_reading", default=False)


def classify(service: str, method: str, url: str, headers: Mapping[str, str]) -> str:
    """The billable operation a storage request performs, e.g. `queue.GetMessages`, `blob.PutBlob`."""
    parts = urlsplit(url)
    query = {k.lower(): v[0].lower() for k, v in parse_qs(parts.query).items()}
    path = parts.path.rstrip("/")
    comp = query.get("comp")
    method = method.upper()
    if service == "queue":
        return "queue." + _queue_operation(method, path, query, comp)
    return "blob." + _blob_operation(method, query, comp, {k.lower(): v for k, v in headers.items()})


def _queue_operation(method: str, path: str, query: Mapping[str, str], comp: str | None) -> str:
    if comp == "list":
        return "ListQueues"
    if comp == "metadata":
        return "GetQueueMetadata" if method in {"GET", "HEAD"} else "SetQueueMetadata"
    if comp == "acl":
        return "GetQueueAcl" if method in {"GET", "HEAD"} else "SetQueueAcl"
    if comp is not None:
        return f"{method.title()}{comp.title()}"
    segments = path.split("/")
    if "messages" in segments:
        on_message = segments[-1] != "messages"
        if method == "POST":
            return "PutMessage"
        if method == "GET":
            return "PeekMessages" if query.get("peekonly") == "true" else "GetMessages"
        if method == "DELETE":
            return "DeleteMessage" if on_message else "ClearMessages"
        if method == "PUT":
            return "UpdateMessage"
    return {"PUT": "CreateQueue", "DELETE": "DeleteQueue"}.get(method, f"{method.title()}Queue")


def _blob_operation(method: str, query: Mapping[str, str], comp: str | None, headers: Mapping[str, str]) -> str:
    if query.get("restype") == "container":
        if comp == "list":
            return "ListBlobs"
        if comp == "lease":
            return "LeaseContainer"
        return {"PUT": "CreateContainer", "DELETE": "DeleteContainer"}.get(method, "GetContainerProperties")
    if comp == "list":
        return "ListContainers"
    if comp == "lease":
        return "LeaseBlob." + headers.get("x-ms-lease-action", "unknown").title()
    if comp in {"block", "blocklist", "metadata", "properties", "tags", "snapshot", "appendblock", "page"}:
        return {"GET": "Get", "HEAD": "Get"}.get(method, "Put" if method == "PUT" else method.title()) + comp.title()
    if method == "PUT":
        return "CopyBlob" if "x-ms-copy-source" in headers else "PutBlob"
    return {"GET": "GetBlob", "HEAD": "GetBlobProperties", "DELETE": "DeleteBlob"}.get(method, f"{method.title()}Blob")


class TransactionCounter(SansIOHTTPPolicy):  # type: ignore[type-arg]
    """Counts every storage request by operation. Thread-safe; one instance per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: Counter[str] = Counter()
        self._reads: Counter[str] = Counter()  # the part spent answering the HTTP API's read routes

    def hook(self, service: str) -> Any:
        """A `raw_request_hook` for a storage client of `service` ('queue' or 'blob')."""

        def on_request(request: PipelineRequest[Any]) -> None:
            http = request.http_request
            self.count(classify(service, http.method, http.url, http.headers))

        return on_request

    def count(self, operation: str) -> None:
        with self._lock:
            self._totals[operation] += 1
            if _reading.get():
                self._reads[operation] += 1
        tally = _session.get()
        if tally is not None:
            tally[operation] += 1

    def totals(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._totals.items()))

    def read_totals(self) -> dict[str, int]:
        """The part of `totals` counted inside `reading()`."""
        with self._lock:
            return dict(sorted(self._reads.items()))


@contextmanager
def tally() -> Iterator[Counter[str]]:
    """Count this context's transactions (tasks started inside inherit it) into a fresh Counter."""
    counter: Counter[str] = Counter()
    token = _session.set(counter)
    try:
        yield counter
    finally:
        _session.reset(token)


@contextmanager
def reading() -> Iterator[None]:
    """Count this context's transactions as reads made to answer an API call (status, queues, poison, the page),
    so the work's cost can be told from what looking at it costs."""
    token = _reading.set(True)
    try:
        yield
    finally:
        _reading.reset(token)
