"""The HTTP API as plain data: each call returns an `ApiResponse`; errors become JSON bodies that name
the problem. function_app.py only turns these into `func.HttpResponse` objects."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from shared.access import caller, replay_scope
from shared.batch import labels, lifecycle
from shared.core import identity, lanes, webhooks
from shared.core.errors import MalformedRequest, RequestError, StorageError, StorageUnavailable
from shared.core.identity import Caller
from shared.core.lanes import Lane
from shared.core.settings import Settings
from shared.intake.body import Limits
from shared.intake.submit import submit
from shared.ops import lifecycle as batch_lifecycle
from shared.ops import listing, parked, probe, replay, replay_jobs, reports
from shared.ops.replay_request import replay_request
from shared.ops.status import FINAL
from shared.runtime import services
from shared.telemetry import metering

log = logging.getLogger(__name__)

JSON = "application/json"
NDJSON = "application/x-ndjson"
DEFAULT_RESULT_LINES, MAX_RESULT_LINES = 10_000, 100_000  # a page of results: about 100 bytes a line
LIFECYCLE_FIELDS = ("expires_at", "not_before", "max_failed_fraction")
OPENAPI = Path(__file__).with_name("openapi.json")
DEFAULT_PAGE, MAX_PAGE = 20, 50


@dataclass(frozen=True)
class ApiResponse:
    status: int
    body: Mapping[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)
    raw: bytes | None = None  # a body that is not one JSON document (the results' NDJSON)
    media_type: str = "application/json"

    def encoded(self) -> bytes:
        return self.raw if self.raw is not None else json.dumps(self.body, separators=(",", ":")).encode("utf-8")


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


def submit_lane(headers: Mapping[str, str], params: Mapping[str, str], who: Caller | None = None) -> Lane:
    """The tenant and priority a submit asks for (`shared.core.lanes`); a JSON 400 naming the rule otherwise. The
    tenant is the caller's own: one it names (`X-Tenant`) must be its own unless it is the operator (a 403)."""
    named = "x-tenant" in headers or "tenant" in params
    asked = asked_for("tenant", lanes.checked_tenant, headers, params) if named else None
    tenant = identity.submit_tenant(who or identity.HEADER_CALLER, asked, lanes.DEFAULT_TENANT)
    priority = asked_for("priority", lanes.checked_priority, headers, params)
    return Lane("", tenant, priority)


def submit_options(headers: Mapping[str, str], params: Mapping[str, str]) -> lifecycle.Options:
    """The lifecycle a submit asks for (`shared.batch.lifecycle`): `expires_in_s`, `not_before` and
    `max_failed_fraction`, each a query parameter or an `X-Expires-In-S`-style header; a JSON 400 naming it."""

    def given(name: str) -> str | None:
        header = headers.get("x-" + name.replace("_", "-"))
        return header if header is not None else params.get(name)

    now = datetime.now(timezone.utc)
    try:
        expires_in_s = lifecycle.checked_expires_in_s(given("expires_in_s"))
        not_before = lifecycle.checked_not_before(given("not_before"), now)
        fraction = lifecycle.checked_fraction(given("max_failed_fraction"))
    except ValueError as e:
        raise MalformedRequest(str(e)) from None
    return replace(lifecycle.options(expires_in_s, not_before, fraction, now), not_before_asked=given("not_before"))


def submit_callback(
    headers: Mapping[str, str], params: Mapping[str, str], settings: Settings, request_url: str | None = None
) -> str | None:
    """The completion notice's URL, as an `X-Callback-Url` header or a `callback_url` query parameter (the header
    wins); a JSON 400 naming `callback_url` unless a notice may go there (`shared.core.webhooks`), or when the
    query gives it twice (the host hands the values on joined by a comma: a URL nobody named)."""
    query = urlsplit(request_url or "").query
    if [k for k, _ in parse_qsl(query, keep_blank_values=True)].count("callback_url") > 1:
        raise MalformedRequest("callback_url is given more than once: name one URL", field="callback_url")
    url = headers.get("x-callback-url", params.get("callback_url"))
    if url is None:
        return None
    try:
        return webhooks.checked_callback_url(
            url, origins=settings.callback_origins(), allow_http_loopback=settings.callback_allow_http_loopback
        )
    except ValueError as e:
        raise MalformedRequest(str(e), field="callback_url") from None


async def submit_batch(
    body: bytes, headers: Mapping[str, str], params: Mapping[str, str] | None = None, request_url: str | None = None
) -> ApiResponse:
    """`headers` with lower-case names; `params`: the query string; `request_url`: the request's whole URL."""

    async def call() -> ApiResponse:
        lane = submit_lane(headers, params or {}, caller(headers))
        options = replace(submit_options(headers, params or {}), metadata=labels.given(headers, params or {}))
        found = services()
        callback_url = submit_callback(headers, params or {}, found.settings, request_url)
        done = await submit(
            found,
            body,
            content_type=headers.get("content-type"),
            content_encoding=headers.get("content-encoding"),
            idempotency_key=headers.get("idempotency-key"),
            lane=lane,
            options=options,
            callback_url=callback_url,
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
            **{k: v for k in LIFECYCLE_FIELDS if (v := getattr(manifest, k)) is not None},
        }
        if manifest.callback_url is not None:
            answer_body["callback_url"] = manifest.callback_url
        if manifest.metadata:
            answer_body["metadata"] = manifest.metadata
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


async def batch_status(batch_id: str, headers: Mapping[str, str] | None = None) -> ApiResponse:
    async def call() -> ApiResponse:
        return ApiResponse(200, await reports.read_batch_status(services(), batch_id, caller(headers)))

    return await read(call)


async def cancel_batch(batch_id: str, headers: Mapping[str, str] | None = None) -> ApiResponse:
    """Cancel a batch (idempotent): 202 with its status while it is `cancelling`, 200 once final."""

    async def call() -> ApiResponse:
        status = await batch_lifecycle.cancel(services(), batch_id, caller(headers))
        return ApiResponse(200 if status["status"] in FINAL else 202, status, {"Location": status_url(batch_id)})

    return await answer(call)


ANY_ITEMS = 10**12  # a continuation's bound before the batch is read (its shape: at most 12 digits)


def results_request(params: Mapping[str, str], items: int) -> tuple[str | None, int, int]:
    """`?status=` (one of succeeded, failed, cancelled, expired), `?limit=` (lines, 1 to MAX_RESULT_LINES) and
    `?continuation=` (the `X-Continuation` the previous page answered: the next position)."""
    unknown = sorted(set(params) - {"status", "limit", "continuation", "code"})
    if unknown:
        raise MalformedRequest(f"unknown query parameter {unknown[0]!r}; this route takes status, limit, continuation")
    try:
        status = batch_lifecycle.checked_status(params.get("status"))
    except ValueError as e:
        raise MalformedRequest(str(e)) from None
    limit = int_param(params, "limit", DEFAULT_RESULT_LINES, 1, MAX_RESULT_LINES)
    token = params.get("continuation", "0")
    if not (token.isascii() and token.isdigit() and len(token) <= 12 and int(token) <= items):
        raise MalformedRequest('"continuation" must be the X-Continuation a previous page of this batch answered')
    return status, limit, int(token)


async def batch_results(
    batch_id: str, params: Mapping[str, str], headers: Mapping[str, str] | None = None
) -> ApiResponse:
    """A page of the batch's results as NDJSON, in position order; `X-Continuation` names the next page while
    there may be more, `X-Batch-Status` the batch's status (the lines agree with its counts once final)."""

    async def call() -> ApiResponse:
        results_request(params, ANY_ITEMS)  # judged before any storage call: a malformed page is a 400, never a 503
        found = services()
        manifest, _, entries = await batch_lifecycle.read(found, batch_id, caller(headers))
        status, limit, start = results_request(params, manifest.items)
        lines, last = [], None
        async for line in batch_lifecycle.export(found, manifest, entries, status=status, start=start, limit=limit):
            lines.append(json.dumps(line, separators=(",", ":")))
            last = line["position"]
        out = {"X-Batch-Status": reports.status_of(manifest, entries)}
        if len(lines) == limit and last is not None and last + 1 < manifest.items:
            out["X-Continuation"] = str(last + 1)
        body = ("\n".join(lines) + "\n" if lines else "").encode("utf-8")
        return ApiResponse(200, {}, out, raw=body, media_type=NDJSON)

    return await read(call)


def page_request(params: Mapping[str, str], more: Sequence[str] = ()) -> tuple[int, str | None]:
    """`?limit=N` (1-50, default 20) and `?continuation=` (the token the previous page answered), and the route's
    `more` parameters."""
    unknown = sorted(set(params) - {"limit", "continuation", "code", *more})
    if unknown:
        takes = ", ".join(["limit", "continuation", *more])
        raise MalformedRequest(f"unknown query parameter {unknown[0]!r}; this route takes {takes}")
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


async def batch_list(params: Mapping[str, str], headers: Mapping[str, str] | None = None) -> ApiResponse:
    """Recent batches: the caller's tenant's own (its own index), every tenant's for the operator."""

    async def call() -> ApiResponse:
        who = caller(headers)
        limit, continuation = page_request(params, listing.PARAMS)
        only = listing.list_filter(params)
        if only.tenant is not None and only.tenant != who.tenant:
            who.needs_operator("another tenant's batches")
        tenant = only.tenant if who.operator else who.tenant
        return ApiResponse(200, await reports.read_batch_page(services(), limit, continuation, tenant, only))

    return await read(call)


async def queue_status(headers: Mapping[str, str] | None = None) -> ApiResponse:
    async def call() -> ApiResponse:
        caller(headers).needs_operator("the queues view")
        return ApiResponse(200, await reports.read_queue_status(services()))

    return await read(call)


async def poison_list(params: Mapping[str, str] | None = None, headers: Mapping[str, str] | None = None) -> ApiResponse:
    """Each partition's depth and first peeked page, and every parked chunk the index holds, newest first, a page
    at a time (`?limit=` 1-100, default 32; `?continuation=` the token the previous page answered)."""

    async def call() -> ApiResponse:
        caller(headers).needs_operator("the parked chunks' listing")
        query = params or {}
        unknown = sorted(set(query) - {"limit", "continuation", "code"})
        if unknown:
            raise MalformedRequest(f"unknown query parameter {unknown[0]!r}; this route takes limit and continuation")
        limit = int_param(query, "limit", parked.PARKED_PAGE, 1, parked.MAX_PARKED_PAGE)
        page = await parked.page_parked(services(), limit, query.get("continuation"))
        return ApiResponse(200, {"partitions": await parked.list_parked(services())} | page)

    return await read(call)


async def poison_detail(message_id: str, headers: Mapping[str, str] | None = None) -> ApiResponse:
    async def call() -> ApiResponse:
        caller(headers).needs_operator("a parked chunk's detail")
        return ApiResponse(200, await parked.inspect(services(), message_id))

    return await read(call)


async def poison_replay(body: bytes, headers: Mapping[str, str] | None = None) -> ApiResponse:
    async def call() -> ApiResponse:
        found, who = services(), caller(headers)
        request = replay_request(body, Limits.from_settings(found.settings))
        await replay_scope(found, who, request)
        if request.pop("background", False):
            job = await replay_jobs.start(found, **request)
            return ApiResponse(202, job.view(), {"Location": replay_jobs.status_url(job.job_id)})
        return ApiResponse(200, await replay.replay(found, **request))

    return await answer(call)


async def replay_status(job_id: str, headers: Mapping[str, str] | None = None) -> ApiResponse:
    async def call() -> ApiResponse:
        caller(headers).needs_operator("a background replay's status")
        return ApiResponse(200, await replay_jobs.status(services(), job_id))

    return await read(call)


async def probe_start() -> ApiResponse:
    """The deployment's probe (`shared.ops.probe`): 202 once sent to Service Bus."""

    async def call() -> ApiResponse:
        started = await probe.start(services())
        return ApiResponse(202, started, {"Location": started["status_url"]})

    return await answer(call)


async def probe_status(probe_id: str) -> ApiResponse:
    async def call() -> ApiResponse:
        return ApiResponse(200, await probe.status(services(), probe_id))

    return await read(call)


@cache
def openapi_document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(OPENAPI.read_text())
    return document


async def operator_page(headers: Mapping[str, str] | None = None) -> ApiResponse | None:
    """None when the caller may see the operator's page (`/api/dashboard`); else the 401/403 to answer."""

    async def call() -> ApiResponse:
        caller(headers).needs_operator("the operator's page")
        return ApiResponse(204, {})

    return None if (allowed := await answer(call)).status == 204 else allowed


async def openapi() -> ApiResponse:
    return ApiResponse(200, openapi_document())
