"""Building the API's requests and reading its answers (no I/O)."""

from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from queue_drain_client.types import Batch, ResultLine, ResultsPage

DEFAULT_URL = "http://localhost:7071"
NDJSON = "application/x-ndjson"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    content: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, str] = field(default_factory=dict)
    safe: bool = True  # repeating it is harmless (a read, a cancel, a keyed submit): retried on any failure


def base_headers(key: str | None, token: str | None = None) -> dict[str, str]:
    """The function key (x-functions-key) and, for an app behind App Service Authentication, the caller's bearer
    token (its tenant is the token's)."""
    headers = {"x-functions-key": key} if key else {}
    return headers | ({"authorization": f"Bearer {token}"} if token else {})


def checked_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"the app's URL must be http(s), not {url!r}")
    return url.rstrip("/")


def new_idempotency_key() -> str:
    """A submit's own key, sent on every attempt of it: a retry after a lost answer finds the first batch."""
    return f"qd-{uuid.uuid4().hex}"


def aware(when: datetime, name: str) -> datetime:
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime (with its offset)")
    return when


def not_before_text(not_before: datetime | int | None) -> str | None:
    """A delay in whole seconds, or an aware datetime as RFC 3339 (the two forms the API takes)."""
    if not_before is None or isinstance(not_before, int):
        return None if not_before is None else str(not_before)
    if not_before.tzinfo is None or not_before.utcoffset() is None:
        raise ValueError("not_before must be an aware datetime (with its offset), or a delay in seconds")
    return not_before.isoformat()


def body_of(items: Iterable[Any] | None, file: str | Path | None) -> tuple[bytes, str]:
    """`items` as NDJSON, or a file as it is (`.ndjson`/`.jsonl` as NDJSON, anything else as JSON)."""
    if (items is None) == (file is None):
        raise ValueError("give either items or a file")
    if file is not None:
        path = Path(file)
        return path.read_bytes(), NDJSON if path.suffix in {".ndjson", ".jsonl"} else "application/json"
    assert items is not None
    return b"".join(json.dumps(item, separators=(",", ":")).encode("utf-8") + b"\n" for item in items), NDJSON


def submit_request(
    items: Iterable[Any] | None,
    file: str | Path | None,
    *,
    idempotency_key: str,
    tenant: str | None = None,
    priority: str | None = None,
    callback_url: str | None = None,
    expires_in_s: int | None = None,
    not_before: datetime | int | None = None,
    max_failed_fraction: float | None = None,
    metadata: Mapping[str, str] | None = None,
) -> Request:
    """POST /api/batches, the body gzipped, the options as query parameters, `metadata` as a JSON object."""
    body, content_type = body_of(items, file)
    headers = {"content-type": content_type, "content-encoding": "gzip", "idempotency-key": idempotency_key}
    named: dict[str, Any] = {
        "tenant": tenant,
        "priority": priority,
        "callback_url": callback_url,
        "expires_in_s": expires_in_s,
        "not_before": not_before_text(not_before),
        "max_failed_fraction": max_failed_fraction,
        "metadata": json.dumps(dict(metadata), separators=(",", ":")) if metadata is not None else None,
    }
    params = {k: str(v) for k, v in named.items() if v is not None}
    return Request("POST", "/api/batches", gzip.compress(body, compresslevel=6), headers, params)


def batch_of(response: httpx.Response, idempotency_key: str) -> Batch:
    doc = response.json()
    replayed = response.headers.get("idempotent-replayed", "").lower() == "true"
    return Batch(
        doc["batch_id"], doc["items"], doc["chunks"], doc["status_url"], doc["trigger"], replayed, idempotency_key, doc
    )


def batch_path(batch_id: str, tail: str = "") -> str:
    if not batch_id or "/" in batch_id or "?" in batch_id:
        raise ValueError(f"not a batch id: {batch_id!r}")
    return f"/api/batches/{batch_id}{tail}"


def results_request(batch_id: str, status: str | None, limit: int | None, continuation: str | None) -> Request:
    named = {"status": status, "limit": limit, "continuation": continuation}
    return Request("GET", batch_path(batch_id, "/results"), params={k: str(v) for k, v in named.items() if v})


def results_page(response: httpx.Response) -> ResultsPage:
    """One page of the results route: its NDJSON lines (one item's outcome each), the batch's status
    (`X-Batch-Status`) and the continuation `X-Continuation` names for the next page (None on the last)."""
    lines: list[ResultLine] = [json.loads(line) for line in response.content.splitlines() if line.strip()]
    return ResultsPage(lines, response.headers.get("x-batch-status", ""), response.headers.get("x-continuation"))


def list_params(
    page: int,
    status: str | None,
    tenant: str | None,
    since: datetime | None,
    until: datetime | None,
    continuation: str | None,
) -> dict[str, str]:
    named = {
        "limit": page,
        "status": status,
        "tenant": tenant,
        "since": aware(since, "since").isoformat() if since is not None else None,
        "until": aware(until, "until").isoformat() if until is not None else None,
        "continuation": continuation,
    }
    return {k: str(v) for k, v in named.items() if v is not None}


def replay_request(
    batch_id: str | None,
    message_ids: Iterable[str] | None,
    everything: bool,
    limit: int | None,
    rate: float | None,
    background: bool,
) -> Request:
    """POST /api/poison/replay: a batch's parked chunks, the named ones, or (`everything`: `"all": true`) every one."""
    if everything == (batch_id is not None or message_ids is not None):
        raise ValueError("replay: name a batch_id or message_ids, or pass all=True (not both)")
    doc: dict[str, Any] = {"all": True} if everything else {}
    named = {"batch_id": batch_id, "limit": limit, "rate": rate, "background": background or None}
    doc |= {k: v for k, v in named.items() if v is not None}
    if message_ids is not None:
        doc["message_ids"] = list(message_ids)
    # A replay is not repeated after an attempt that may have done something: it moves chunks.
    return Request(
        "POST", "/api/poison/replay", json.dumps(doc).encode(), {"content-type": "application/json"}, {}, False
    )
