"""One exception per JSON error code of the API, under one base class (`QueueDrainError`)."""

from __future__ import annotations

import json
from typing import Any


class QueueDrainError(Exception):
    """Base class of every error this client raises."""


class ConnectionFailed(QueueDrainError):
    """Raised when the app cannot be reached (refused, DNS, TLS, timeout)."""


class WaitTimeout(QueueDrainError):
    """Raised when `wait()` gives up before the batch is final; `status` is the last one read."""

    def __init__(self, message: str, status: dict[str, Any]) -> None:
        super().__init__(message)
        self.status = status


class ApiError(QueueDrainError):
    """Raised when the API answers with an error: `status` (HTTP), `code` (the JSON error code), `message`,
    and `details` (the rest of the error object, e.g. `limit`, `field`, `incident`). An unknown code is an
    `ApiError` itself."""

    code = ""

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}


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
    """Raised for `idempotency_conflict` (409): the key was used with another body, or is in use right now."""

    code = "idempotency_conflict"


class ReplayConflict(ApiError):
    """Raised for `replay_conflict` (409)."""

    code = "replay_conflict"


class SubmitNotStored(ApiError):
    """Raised for `submit_not_stored` (503): nothing was kept; send the batch again (same Idempotency-Key)."""

    code = "submit_not_stored"


class Busy(ApiError):
    """Raised for `busy` (503): retry shortly."""

    code = "busy"


class NotFound(ApiError):
    """Raised for `not_found` (404), and for a 404 without a body (no such route: is the URL the app's?)."""

    code = "not_found"


class Unauthorized(ApiError):
    """Raised for a 401 (the function key is missing or wrong)."""

    code = "unauthorized"


class StorageUnavailable(ApiError):
    """Raised for `storage_unavailable` (503): retry later."""

    code = "storage_unavailable"


class StorageFailed(ApiError):
    """Raised for `storage_error` (502); `details["incident"]` finds it in the app's log."""

    code = "storage_error"


class InternalError(ApiError):
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
        SubmitNotStored,
        Busy,
        NotFound,
        Unauthorized,
        StorageUnavailable,
        StorageFailed,
        InternalError,
    )
}
EMPTY_BODY = {
    401: ("unauthorized", "the function key is missing or wrong"),
    404: ("not_found", "no such route here (is the URL the function app's?)"),
}


def error_for(status: int, body: bytes) -> ApiError:
    """The most specific exception for an error answer."""
    if not body.strip():
        code, message = EMPTY_BODY.get(status, ("", "the server gave no details"))
        return BY_CODE.get(code, ApiError)(status, code, message)
    try:
        error = json.loads(body)["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        return ApiError(status, "", body[:300].decode("utf-8", "replace"))
    details = {k: v for k, v in error.items() if k not in {"code", "message"}}
    return BY_CODE.get(code, ApiError)(status, code, message, details)
