"""One exception per JSON error code of the API, in one tree under `QueueDrainError`.

QueueDrainError
├── ConnectionFailed         the app could not be reached (after the retries)
├── WaitTimeout              wait() gave up before the batch was final
├── NotFinal                 results(wait=False) on a batch still running: a partial export is refused
└── ApiError                 the API answered an error: status, code, message, details, retry_after, response
    ├── BadRequest, MalformedRequest, LimitExceeded, UnsupportedMediaType, NotFound,
    │   IdempotencyConflict, ReplayConflict, BatchConflict, BatchFinal, Unauthorized (Unauthenticated),
    │   Forbidden
    └── RetryableError       the client retries these itself (max_retries); raised once they run out
        ├── RateLimited (429)            QuotaExceeded
        └── ServerError (5xx)            Busy, SubmitNotStored, StorageUnavailable, ProbeNotSent,
                                         StorageFailed, InternalError
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from queue_drain_client._retry import retry_after_s


class QueueDrainError(Exception):
    """Base class of every error this client raises."""


class ConnectionFailed(QueueDrainError):
    """Raised when the app cannot be reached (refused, DNS, TLS, timeout), once the retries are spent."""


class WaitTimeout(QueueDrainError):
    """Raised when `wait()` gives up before the batch is final; `status` is the last one read."""

    def __init__(self, message: str, status: Any) -> None:
        super().__init__(message)
        self.status = status


class NotFinal(QueueDrainError):
    """Raised by `results(..., wait=False)` when the batch is not final: its export would be partial (items still
    pending have no line yet). `batch_status` is the status the results route named. Read a running batch's
    lines page by page, each with its status, with `result_pages()`."""

    def __init__(self, message: str, batch_status: str) -> None:
        super().__init__(message)
        self.batch_status = batch_status


class ApiError(QueueDrainError):
    """Raised when the API answers with an error: `status` (HTTP), `code` (the JSON error code), `message`,
    `details` (the rest of the error object, e.g. `limit`, `field`, `incident`), `retry_after` (seconds, from
    `Retry-After`, or None) and `response` (the httpx.Response, or None). An unknown code is the class for its
    status (`RateLimited`, `ServerError`) or an `ApiError` itself."""

    code = ""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        response: httpx.Response | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.response = response
        self.retry_after = retry_after_s(response.headers) if response is not None else None


class BadRequest(ApiError):
    """Raised for `bad_request` (400)."""

    code = "bad_request"


class MalformedRequest(ApiError):
    """Raised for `malformed_request` (400): a body, header or parameter the API refused; `details["field"]`
    names it where the API does."""

    code = "malformed_request"


class LimitExceeded(ApiError):
    """Raised for `limit_exceeded` (413 or 400): `details["limit"]` names the limit."""

    code = "limit_exceeded"


class UnsupportedMediaType(ApiError):
    """Raised for `unsupported_media_type` (415)."""

    code = "unsupported_media_type"


class IdempotencyConflict(ApiError):
    """Raised for `idempotency_conflict` (409): the key was used with another request (`details["different"]`
    names what changed), or its first use was still in flight after the retries."""

    code = "idempotency_conflict"


class ReplayConflict(ApiError):
    """Raised for `replay_conflict` (409): a parked chunk's record kept changing under the replay; it stays
    parked."""

    code = "replay_conflict"


class BatchConflict(ApiError):
    """Raised for `batch_conflict` (409): the batch cannot take this request in its state (a cancel of a batch
    still being submitted, a replay of a cancelled batch's chunk)."""

    code = "batch_conflict"


class BatchFinal(ApiError):
    """Raised for `batch_final` (409): the batch is final, so nothing of it is replayed (an outcome once recorded
    never changes)."""

    code = "batch_final"


class NotFound(ApiError):
    """Raised for `not_found` (404), and for a 404 without a body (no such route: is the URL the app's?)."""

    code = "not_found"


class Unauthorized(ApiError):
    """Raised for a 401 without a body (the function key is missing or wrong)."""

    code = "unauthorized"


class Unauthenticated(Unauthorized):
    """Raised for `unauthenticated` (401): the app identifies callers and this request carried no bearer token it
    accepts (`Client(token=...)`)."""

    code = "unauthenticated"


class Forbidden(ApiError):
    """Raised for `forbidden` (403): the caller is known but may not do this (another tenant's view without the
    operator role, a submit naming another tenant)."""

    code = "forbidden"


class RetryableError(ApiError):
    """Base class of the answers that say to try again later; the client has already retried them
    `max_retries` times when it raises one (`retry_after` says how long the server asked to wait)."""


class RateLimited(RetryableError):
    """Raised for a 429 (a front end's, or one of these codes')."""

    code = "rate_limited"


class QuotaExceeded(RateLimited):
    """Raised for `quota_exceeded` (429): the tenant's pending items or submits per minute are at their quota;
    `details["limit"]` names it."""

    code = "quota_exceeded"


class ServerError(RetryableError):
    """Raised for a 5xx (a front end's bare 502/503, or one of these codes')."""

    code = "server_error"


class Busy(ServerError):
    """Raised for `busy` (503): the app is decoding as many large bodies as it takes at once."""

    code = "busy"


class SubmitNotStored(ServerError):
    """Raised for `submit_not_stored` (503): nothing was kept; send the batch again (the same Idempotency-Key,
    which `submit` reuses across its own retries)."""

    code = "submit_not_stored"


class StorageUnavailable(ServerError):
    """Raised for `storage_unavailable` (503)."""

    code = "storage_unavailable"


class ProbeNotSent(ServerError):
    """Raised for `probe_not_sent` (503): Service Bus is away or refuses the app."""

    code = "probe_not_sent"


class StorageFailed(ServerError):
    """Raised for `storage_error` (502); `details["incident"]` finds it in the app's log."""

    code = "storage_error"


class InternalError(ServerError):
    """Raised for `internal` (500); `details["incident"]` finds it in the app's log."""

    code = "internal"


BY_CODE: dict[str, type[ApiError]] = {
    cls.code: cls
    for cls in (
        BadRequest,
        MalformedRequest,
        LimitExceeded,
        UnsupportedMediaType,
        IdempotencyConflict,
        ReplayConflict,
        BatchConflict,
        BatchFinal,
        NotFound,
        Unauthorized,
        Unauthenticated,
        Forbidden,
        QuotaExceeded,
        Busy,
        SubmitNotStored,
        StorageUnavailable,
        ProbeNotSent,
        StorageFailed,
        InternalError,
    )
}
EMPTY_BODY = {
    401: ("unauthorized", "the function key is missing or wrong"),
    404: ("not_found", "no such route here (is the URL the function app's?)"),
}


def by_status(status: int) -> type[ApiError]:
    if status == 429:
        return RateLimited
    return ServerError if status >= 500 else ApiError


def error_for(response: httpx.Response) -> ApiError:
    """The most specific exception for an error answer (its body read)."""
    status, body = response.status_code, response.content
    if not body.strip():
        code, message = EMPTY_BODY.get(status, ("", "the server gave no details"))
        return BY_CODE.get(code, by_status(status))(status, code, message, response=response)
    try:
        error = json.loads(body)["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        return by_status(status)(status, "", body[:300].decode("utf-8", "replace"), response=response)
    details = {k: v for k, v in error.items() if k not in {"code", "message"}}
    return BY_CODE.get(code, by_status(status))(status, code, message, details, response=response)
