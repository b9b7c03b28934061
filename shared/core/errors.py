"""The project's error tree. SDK exceptions are translated into these at the I/O boundary."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class QueueDrainError(Exception):
    """Base class of every error this app raises on purpose."""


class SettingsError(QueueDrainError):
    """Raised when an app setting is missing or malformed; the message names the variable."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"setting {variable}: {problem}")
        self.variable = variable
        self.problem = problem


class RequestError(QueueDrainError):
    """Raised when a client request cannot be accepted; maps to a 4xx JSON answer."""

    status = 400
    code = "bad_request"
    retry_after_s: int | None = None  # sent as Retry-After when set

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: Mapping[str, Any] = details

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.details}}


class MalformedRequest(RequestError):
    """Raised when the body is not valid gzip, UTF-8, JSON or NDJSON, or has the wrong shape."""

    code = "malformed_request"


class LimitExceeded(RequestError):
    """Raised when a request breaks a configured limit; `limit` names the setting."""

    code = "limit_exceeded"

    def __init__(self, message: str, *, limit: str, maximum: int, status: int = 413, **details: Any) -> None:
        super().__init__(message, limit=limit, maximum=maximum, **details)
        self.status = status


class UnsupportedMediaType(RequestError):
    """Raised when Content-Type or Content-Encoding is not one this API reads."""

    status = 415
    code = "unsupported_media_type"


class IdempotencyConflict(RequestError):
    """Raised when an Idempotency-Key is reused with a different body, or while its first use is in flight."""

    status = 409
    code = "idempotency_conflict"


class ReplayConflict(RequestError):
    """Raised when a parked chunk's result record kept changing under a replay; the chunk stays parked."""

    status = 409
    code = "replay_conflict"


class BatchConflict(RequestError):
    """Raised when a batch cannot take a lifecycle request in its state: a cancel of a batch still being
    submitted or never accepted, a replay of a chunk of a cancelled batch."""

    status = 409
    code = "batch_conflict"


class BatchFinal(RequestError):
    """Raised when a replay names a batch that is final: its outcome is recorded and never changes (its failed
    items go again as a new batch)."""

    status = 409
    code = "batch_final"


class SubmitRefused(RequestError):
    """Raised when a submit could not store its batch within SUBMIT_DEADLINE_S, or storage failed under it:
    nothing it stored counts (the batch is marked abandoned and its chunks are discarded)."""

    status = 503
    code = "submit_not_stored"
    retry_after_s = 10


class ProbeNotSent(RequestError):
    """Raised when the deployment's probe cannot be sent to Service Bus (it is away or refuses the app)."""

    status = 503
    code = "probe_not_sent"
    retry_after_s = 5


class SubmitBusy(RequestError):
    """Raised when MAX_LARGE_SUBMITS large bodies are already being decoded and stored in this process."""

    status = 503
    code = "busy"
    retry_after_s = 5


class NotFound(RequestError):
    """Raised when a requested resource (a batch, a poison chunk) does not exist."""

    status = 404
    code = "not_found"


class Unauthenticated(RequestError):
    """Raised when identity is on (TENANT_FROM=principal) and the request carries no principal the platform set."""

    status = 401
    code = "unauthenticated"


class Forbidden(RequestError):
    """Raised when the caller is known but may not do this: a view across tenants without the operator role, a
    principal that names no tenant, a submit naming another tenant than the caller's own."""

    status = 403
    code = "forbidden"


class QuotaExceeded(RequestError):
    """Raised when a tenant's submit would pass one of its quotas; `limit` names the setting."""

    status = 429
    code = "quota_exceeded"

    def __init__(self, message: str, *, limit: str, maximum: int, retry_after_s: int, **details: Any) -> None:
        super().__init__(message, limit=limit, maximum=maximum, **details)
        self.retry_after_s = retry_after_s


class StorageError(QueueDrainError):
    """Raised when Azure Storage answers with an error this app does not handle itself."""

    def __init__(self, operation: str, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(f"{operation}: {message}")
        self.operation = operation
        self.status = status
        self.error_code = code


class StorageUnavailable(StorageError):
    """Raised when Azure Storage cannot be reached (connection, DNS, timeout)."""


class ResourceMissing(StorageError):
    """Raised when a blob, container or queue does not exist."""


class ResourceConflict(StorageError):
    """Raised when something already exists or a lease is held by someone else."""


class PopReceiptMismatch(StorageError):
    """Raised when a queue message is deleted or updated with a pop receipt that no longer holds: its
    visibility ran out and it was received again (by another drainer, which holds it now). The service answers
    400 PopReceiptMismatch, not 404."""


class NotRun(QueueDrainError):
    """Raised when a chunk's batch was ended or expired between its admission and its handler call: the chunk
    is recorded as `verdict` (cancelled | expired), its handler is not called."""

    def __init__(self, verdict: str) -> None:
        super().__init__(f"batch {verdict}")
        self.verdict = verdict


class SessionEnding(QueueDrainError):
    """Raised when a chunk's handler call would start after its drain session stopped starting calls (its budget
    spent, or its lease's renewal failed), or when its async call was ended before the session's lease could lapse:
    the chunk is put back for the next session, no attempt counted, none of its items given an outcome."""


class PreconditionFailed(StorageError):
    """Raised when an ETag or lease condition no longer holds (someone else wrote first)."""


class TriggerUnavailable(QueueDrainError):
    """Raised when a trigger event cannot be published to Service Bus."""


class MalformedEvent(QueueDrainError):
    """Raised when a trigger event cannot be decoded; the Service Bus trigger lets it dead-letter."""


class MalformedEnvelope(QueueDrainError):
    """Raised when a work-queue message is not a chunk envelope this app wrote."""


class HandlerError(QueueDrainError):
    """Raised when the configured chunk handler cannot be loaded or breaks its contract."""


class Overloaded(QueueDrainError):
    """Raised by a handler whose downstream says it is overloaded (an HTTP 429 or 503, a throttling error):
    the chunk goes back on the queue for `retry_after_s` (or the drainer's own back-off) without counting an
    attempt toward MAX_DEQUEUE_COUNT, and the drainer takes no new chunk until then. Raise it before the chunk
    has done anything, or make the handler idempotent: the whole chunk is handled again."""

    def __init__(self, message: str = "downstream overloaded", *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
