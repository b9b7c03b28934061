"""What the sync and the async client share: building a request and reading an answer (no I/O)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from queue_drain_client.errors import error_for

DEFAULT_URL = "http://localhost:7071"
# Every status a batch stays in once reached (cancelled, expired and failed come with the batch lifecycle).
FINAL = frozenset({"completed", "completed_with_failures", "cancelled", "expired", "failed", "abandoned"})
NDJSON = "application/x-ndjson"
Option = str | int | float | bool


@dataclass(frozen=True)
class Batch:
    """A submitted batch, as the submit answered (`raw` is the whole answer)."""

    batch_id: str
    items: int
    chunks: int
    status_url: str
    trigger: str
    replayed: bool = False  # an Idempotency-Key seen before: the first batch's answer, nothing stored again
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    content: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, str] = field(default_factory=dict)


def base_headers(key: str | None, token: str | None = None) -> dict[str, str]:
    """The function key (x-functions-key) and, for an app behind App Service Authentication, the caller's bearer
    token (its tenant is the token's)."""
    headers = {"x-functions-key": key} if key else {}
    return headers | ({"authorization": f"Bearer {token}"} if token else {})


def checked_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"the app's URL must be http(s), not {url!r}")
    return url.rstrip("/")


def text(value: Option) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def submit_request(
    items: Iterable[Any] | None,
    file: str | Path | None,
    *,
    tenant: str | None,
    priority: str | None,
    idempotency_key: str | None,
    callback_url: str | None,
    options: Mapping[str, Option] | None,
) -> Request:
    """POST /api/batches: `items` as gzipped NDJSON, or a file as it is (`.ndjson`/`.jsonl` as NDJSON, anything
    else as JSON `{"items": [...]}`), gzipped. Options go as query parameters, `options` the ones this client has
    no name for."""
    if (items is None) == (file is None):
        raise ValueError("give either items or a file")
    if file is not None:
        path = Path(file)
        body = path.read_bytes()
        content_type = NDJSON if path.suffix in {".ndjson", ".jsonl"} else "application/json"
    else:
        assert items is not None
        body = b"".join(json.dumps(item, separators=(",", ":")).encode("utf-8") + b"\n" for item in items)
        content_type = NDJSON
    headers = {"content-type": content_type, "content-encoding": "gzip"}
    if idempotency_key is not None:
        headers["idempotency-key"] = idempotency_key
    named = {"tenant": tenant, "priority": priority, "callback_url": callback_url}
    params = {k: v for k, v in named.items() if v is not None} | {k: text(v) for k, v in (options or {}).items()}
    return Request("POST", "/api/batches", gzip.compress(body, compresslevel=6), headers, params)


def checked(response: httpx.Response) -> httpx.Response:
    """The response, or the most specific exception for its error (the body must have been read)."""
    if response.status_code >= 400:
        raise error_for(response.status_code, response.content)
    return response


def batch_of(response: httpx.Response) -> Batch:
    doc = response.json()
    replayed = response.headers.get("idempotent-replayed", "").lower() == "true"
    return Batch(doc["batch_id"], doc["items"], doc["chunks"], doc["status_url"], doc["trigger"], replayed, doc)


def batch_path(batch_id: str, tail: str = "") -> str:
    if not batch_id or "/" in batch_id or "?" in batch_id:
        raise ValueError(f"not a batch id: {batch_id!r}")
    return f"/api/batches/{batch_id}{tail}"


def is_final(status: Mapping[str, Any]) -> bool:
    return status.get("status") in FINAL


def settled(status: Mapping[str, Any]) -> int:
    items = status["items"]
    return int(items["succeeded"]) + int(items["failed"])


def results_page(headers: Mapping[str, str], body: bytes) -> tuple[list[Any], str | None]:
    """One page of the results route: its NDJSON lines (one item's outcome each), and the continuation the
    `X-Continuation` header names for the next page (None on the last)."""
    lines = [json.loads(line) for line in body.splitlines() if line.strip()]
    return lines, headers.get("x-continuation")


def replay_body(
    batch_id: str | None, message_ids: Iterable[str] | None, background: bool, *, everything: bool = False
) -> bytes:
    """The replay route's body: it names what to replay (a batch, messages, or `"all": true`), never nothing."""
    if everything == (batch_id is not None or message_ids is not None):
        raise ValueError("replay: name a batch_id or message_ids, or pass all=True (not both)")
    doc: dict[str, Any] = {"all": True} if everything else {}
    if batch_id is not None:
        doc["batch_id"] = batch_id
    if message_ids is not None:
        doc["message_ids"] = list(message_ids)
    if background:
        doc["background"] = True
    return json.dumps(doc).encode("utf-8")
