"""The HTTP API as plain data: each call returns an `ApiResponse`; errors become JSON bodies that name
the problem. function_app.py only turns these into `func.HttpResponse` objects."""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from shared.batch.batches import is_batch_id
from shared.core import lanes
from shared.core.errors import LimitExceeded, MalformedRequest, RequestError, StorageError, StorageUnavailable
from shared.core.lanes import Lane
from shared.intake.body import Limits, check_depth, loads
from shared.intake.submit import submit
from shared.ops import replay, replay_jobs, reports
from shared.runtime import services
from shared.telemetry import metering

log = logging.getLogger(__name__)

JSON = "application/json"
OPENAPI = Path(__file__).with_name("openapi.json")
DEFAULT_PAGE, MAX_PAGE = 20, 50
MAX_REPLAY_BODY_BYTES = 2**20  # 1,000 message ids and a batch id fit many times over
MESSAGE_ID = re.compile(r"[A-Za-z0-9-]{1,64}")  # a queue message id: a GUID on Azure and on Azurite
MAX_REPLAY_RATE = 1000  # chunks per second: beyond this, pacing does nothing a plain replay would not


@dataclass(frozen=True)
class ApiResponse:
    status: int
    body: Mapping[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)

    def encoded(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":")).encode("utf-8")


async def answer(call: Callable[[], Awaitable[ApiResponse]]) -> ApiResponse:
    """Run an API call; map the project's errors to 4xx/503 JSON, anything else to a logged 500."""
    try:
        return await call()
    except RequestError as e:
        retry = {"Retry-After": str(e.retry_after_s)} if e.retry_after_s is not None else {}
        return ApiResponse(e.status, e.body(), retry)
    except StorageUnavailable as e:
        log.warning("storage unavailable: %s", e)
        body = {"error": {"code": "storage_unavailable", "message": "storage is unreachable; retry later"}}
        return ApiResponse(503, body, {"Retry-After": "5"})
    except StorageError as e:
        incident = uuid.uuid4().hex[:12]
        log.error("storage error (incident %s): %s", incident, e)
        return ApiResponse(
            502, {"error": {"code": "storage_error", "message": "storage refused", "incident": incident}}
        )
    except Exception:
        incident = uuid.uuid4().hex[:12]
        log.exception("unhandled error (incident %s)", incident)
        return ApiResponse(500, {"error": {"code": "internal", "message": "internal error", "incident": incident}})


def status_url(batch_id: str) -> str:
    return f"/api/batches/{batch_id}"


def asked_for(
    name: str, check: Callable[[str | None], str], headers: Mapping[str, str], params: Mapping[str, str]
) -> str:
    """A submit option given as an `X-<Name>` header or a `<name>` query parameter, each checked; the header
    wins if both are given (a proxy or SDK may add one; the request's own header is the more deliberate)."""
    header, param = headers.get(f"x-{name}"), params.get(name)
    try:
        from_param = check(param)
        return check(header) if header is not None else from_param
    except ValueError as e:
        raise MalformedRequest(str(e)) from None


def submit_lane(headers: Mapping[str, str], params: Mapping[str, str]) -> Lane:
    """The tenant and priority a submit asks for (`shared.core.lanes`); a JSON 400 naming the rule otherwise."""
    tenant = asked_for("tenant", lanes.checked_tenant, headers, params)
    priority = asked_for("priority", lanes.checked_priority, headers, params)
    return Lane("", tenant, priority)


async def submit_batch(body: bytes, headers: Mapping[str, str], params: Mapping[str, str] | None = None) -> ApiResponse:
    """`headers` with lower-case names; `params`: the query string."""

    async def call() -> ApiResponse:
        lane = submit_lane(headers, params or {})
        done = await submit(
            services(),
            body,
            content_type=headers.get("content-type"),
            content_encoding=headers.get("content-encoding"),
            idempotency_key=headers.get("idempotency-key"),
            lane=lane,
        )
        manifest = done.manifest
        url = status_url(manifest.batch_id)
        answer_body = {
            "batch_id": manifest.batch_id,
            "items": manifest.items,
            "chunks": manifest.chunks,
            "status_url": url,
            "trigger": done.trigger,
            "tenant": manifest.tenant,
            "priority": manifest.priority,
        }
        out_headers = {"Location": url}
        if done.replayed:
            out_headers["Idempotent-Replayed"] = "true"
        return ApiResponse(202, answer_body, out_headers)

    return await answer(call)


async def read(call: Callable[[], Awaitable[ApiResponse]]) -> ApiResponse:
    """`answer` for a read route: its storage transactions are counted as reads
    (`shared.telemetry.metering.reading`)."""
    with metering.reading():
        return await answer(call)


async def batch_status(batch_id: str) -> ApiResponse:
    async def call() -> ApiResponse:
        return ApiResponse(200, await reports.read_batch_status(services(), batch_id))

    return await read(call)


def page_request(params: Mapping[str, str]) -> tuple[int, str | None]:
    """`?limit=N` (1-50, default 20) and `?continuation=` (the token the previous page answered)."""
    unknown = sorted(set(params) - {"limit", "continuation", "code"})
    if unknown:
        raise MalformedRequest(f"unknown query parameter {unknown[0]!r}; this route takes limit and continuation")
    return int_param(params, "limit", DEFAULT_PAGE, 1, MAX_PAGE), params.get("continuation")


def int_param(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    """A query parameter holding an integer from `low` to `high`; a JSON 400 naming it otherwise. Its length is
    checked before it is parsed: Python refuses to parse more than 4,300 digits (a ValueError, not a 400)."""
    text = params.get(name)
    if text is None:
        return default
    digits = text.lstrip("0") or "0"
    if not (text.isascii() and text.isdigit() and len(digits) <= len(str(high)) and low <= int(digits) <= high):
        raise MalformedRequest(f'"{name}" must be an integer from {low} to {high}')
    return int(digits)


async def batch_list(params: Mapping[str, str]) -> ApiResponse:
    async def call() -> ApiResponse:
        limit, continuation = page_request(params)
        return ApiResponse(200, await reports.read_batch_page(services(), limit, continuation))

    return await read(call)


async def queue_status() -> ApiResponse:
    async def call() -> ApiResponse:
        return ApiResponse(200, await reports.read_queue_status(services()))

    return await read(call)


async def poison_list(params: Mapping[str, str] | None = None) -> ApiResponse:
    """Each partition's depth and first peeked page, and every parked chunk the index holds, newest first, a page
    at a time (`?limit=` 1-100, default 32; `?continuation=` the token the previous page answered)."""

    async def call() -> ApiResponse:
        query = params or {}
        unknown = sorted(set(query) - {"limit", "continuation", "code"})
        if unknown:
            raise MalformedRequest(f"unknown query parameter {unknown[0]!r}; this route takes limit and continuation")
        limit = int_param(query, "limit", replay.PARKED_PAGE, 1, replay.MAX_PARKED_PAGE)
        page = await replay.page_parked(services(), limit, query.get("continuation"))
        return ApiResponse(200, {"partitions": await replay.list_parked(services())} | page)

    return await read(call)


async def poison_detail(message_id: str) -> ApiResponse:
    async def call() -> ApiResponse:
        return ApiResponse(200, await replay.inspect(services(), message_id))

    return await read(call)


def replay_request(body: bytes, limits: Limits) -> dict[str, Any]:
    """`{"batch_id"?, "message_ids"?, "limit"?}`; an empty body replays everything. The same depth limit
    and errors as the submit route (a deep body is a 400 that names MAX_JSON_DEPTH, never a RecursionError)."""
    if not body.strip():
        return {}
    if len(body) > MAX_REPLAY_BODY_BYTES:
        raise LimitExceeded(
            f"body is {len(body)} bytes, more than {MAX_REPLAY_BODY_BYTES}",
            limit="replay body size",
            maximum=MAX_REPLAY_BODY_BYTES,
        )
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedRequest(f"body is not valid JSON: not UTF-8 (byte {e.start})") from None
    check_depth(text, limits)
    doc = loads(text, "body")
    if not isinstance(doc, dict) or set(doc) - {"batch_id", "message_ids", "limit", "rate", "background"}:
        raise MalformedRequest(
            'body must be an object with optional "batch_id", "message_ids", "limit", "rate", "background"'
        )
    out: dict[str, Any] = {}
    if doc.get("batch_id") is not None:
        if not isinstance(doc["batch_id"], str) or not is_batch_id(doc["batch_id"]):
            raise MalformedRequest('"batch_id" must be a batch id (32 lowercase hex digits)')
        out["batch_id"] = doc["batch_id"]
    if doc.get("message_ids") is not None:
        ids = doc["message_ids"]
        if not isinstance(ids, list) or not all(isinstance(i, str) and MESSAGE_ID.fullmatch(i) for i in ids):
            raise MalformedRequest('"message_ids" must be a list of message ids (letters, digits and dashes)')
        if len(ids) > 1000:
            raise MalformedRequest('"message_ids" must be a list of at most 1000 message ids')
        out["message_ids"] = set(ids)
    if doc.get("limit") is not None:
        limit = doc["limit"]
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 10_000:
            raise MalformedRequest('"limit" must be an integer from 1 to 10000')
        out["limit"] = limit
    if doc.get("rate") is not None:
        out["rate"] = replay_rate(doc["rate"])
    if "background" in doc:  # null is refused: it must not silently mean "in the foreground"
        if not isinstance(doc["background"], bool):
            raise MalformedRequest('"background" must be true or false')
        out["background"] = doc["background"]
    return out


def replay_rate(rate: Any) -> float:
    """Chunks per second, more than 0 and at most MAX_REPLAY_RATE."""
    if not isinstance(rate, int | float) or isinstance(rate, bool) or not 0 < rate <= MAX_REPLAY_RATE:
        raise MalformedRequest(f'"rate" must be a number of chunks per second above 0, at most {MAX_REPLAY_RATE}')
    return float(rate)


async def poison_replay(body: bytes) -> ApiResponse:
    async def call() -> ApiResponse:
        found = services()
        request = replay_request(body, Limits.from_settings(found.settings))
        if request.pop("background", False):
            job = await replay_jobs.start(found, **request)
            return ApiResponse(202, job.view(), {"Location": replay_jobs.status_url(job.job_id)})
        return ApiResponse(200, await replay.replay(found, **request))

    return await answer(call)


async def replay_status(job_id: str) -> ApiResponse:
    async def call() -> ApiResponse:
        return ApiResponse(200, await replay_jobs.status(services(), job_id))

    return await read(call)


@cache
def openapi_document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(OPENAPI.read_text())
    return document


async def openapi() -> ApiResponse:
    return ApiResponse(200, openapi_document())
