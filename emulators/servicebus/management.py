"""The `$management` node of a queue: peek, renew-lock, schedule/cancel, update-disposition, receive deferred.

A request is an operation name plus a map body; the answer is a status code, a description, an error condition
(for failures) and a map body, which the broker puts on the wire. Failures are raised as the errors in
`errors.py`, each carrying the status code and condition the SDK maps to its own exception.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from proton import UNDESCRIBED, Array, Data, timestamp

from emulators.servicebus import codec
from emulators.servicebus.entities import Queue
from emulators.servicebus.errors import AmqpError, BadRequestError, NotAllowedError
from emulators.servicebus.messages import Outcome

log = logging.getLogger(__name__)

MANAGEMENT_SUFFIX = "/$management"
_VENDOR = "com.microsoft:"

# update-disposition's status names (the SDK spells "defered" with one r).
_DISPOSITIONS = {
    "completed": Outcome.COMPLETE,
    "abandoned": Outcome.ABANDON,
    "defered": Outcome.DEFER,
    "deferred": Outcome.DEFER,
    "suspended": Outcome.DEAD_LETTER,
}
_RECEIVE_AND_DELETE = 0  # receiver-settle-mode "first" in receive-by-sequence-number


@dataclass(frozen=True)
class Response:
    status_code: int
    description: str
    body: dict[str, object] = field(default_factory=dict)
    condition: str | None = None


def handle(queue: Queue, operation: str, body: Mapping[str, object], now_ms: int) -> Response:
    """Run one management operation against `queue`; errors become failure responses, never exceptions."""
    handler = _OPERATIONS.get(operation.removeprefix(_VENDOR))
    if handler is None:
        return Response(
            501, f"The operation {operation!r} is not supported by the stand-in.", {}, "amqp:not-implemented"
        )
    try:
        return handler(queue, body, now_ms)
    except AmqpError as e:
        log.info("management %s on %s failed: %s (%s)", operation, queue.name, e.condition, e.description)
        return Response(e.status_code, e.description, {}, e.condition)


def _peek(queue: Queue, body: Mapping[str, object], now_ms: int) -> Response:
    start = _int(body, "from-sequence-number")
    count = _int(body, "message-count")
    messages = queue.peek(start, count, now_ms)
    if not messages:
        return Response(204, "No messages to peek.")
    return Response(200, "OK", {"messages": [{"message": codec.render(m, peek=True)} for m in messages]})


def _renew_lock(queue: Queue, body: Mapping[str, object], now_ms: int) -> Response:
    expirations = [queue.renew_lock(token, now_ms) for token in _lock_tokens(body)]
    return Response(200, "OK", {"expirations": _array(Data.TIMESTAMP, [timestamp(e) for e in expirations])})


def _schedule(queue: Queue, body: Mapping[str, object], now_ms: int) -> Response:
    _refuse_dead_letter_queue(queue, "schedule messages")
    numbers = []
    for entry in _list(body, "messages"):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("message"), (bytes, memoryview)):
            raise BadRequestError("Each scheduled message needs a 'message' binary.")
        incoming = codec.parse_message(bytes(entry["message"]))
        message_id = entry.get("message-id")
        result = queue.enqueue(
            incoming.payload,
            now_ms,
            message_id=str(message_id) if message_id is not None else incoming.message_id,
            ttl_ms=incoming.ttl_ms,
            scheduled_ms=incoming.scheduled_ms,
        )
        numbers.append(result.sequence_number)
    return Response(200, "OK", {"sequence-numbers": _array(Data.LONG, numbers)})


def _cancel_scheduled(queue: Queue, body: Mapping[str, object], now_ms: int) -> Response:
    queue.cancel_scheduled([_as_int(n, "sequence-numbers") for n in _list(body, "sequence-numbers")], now_ms)
    return Response(200, "OK")


def _update_disposition(queue: Queue, body: Mapping[str, object], now_ms: int) -> Response:
    status = body.get("disposition-status")
    outcome = _DISPOSITIONS.get(str(status))
    if outcome is None:
        raise BadRequestError(f"Unknown disposition-status {status!r}.")
    reason, description = body.get("deadletter-reason"), body.get("deadletter-description")
    for token in _lock_tokens(body):
        queue.settle(
            token,
            outcome,
            now_ms,
            reason=None if reason is None else str(reason),
            description=None if description is None else str(description),
        )
    return Response(200, "OK")


def _receive_by_sequence_number(queue: Queue, body: Mapping[str, object], now_ms: int) -> Response:
    numbers = [_as_int(n, "sequence-numbers") for n in _list(body, "sequence-numbers")]
    lock = body.get("receiver-settle-mode", 1) != _RECEIVE_AND_DELETE
    messages = queue.receive_deferred(numbers, now_ms, lock=lock)
    entries: list[dict[str, object]] = []
    for message in messages:
        entry: dict[str, object] = {"message": codec.render(message)}
        if message.lock_token is not None:
            entry["lock-token"] = message.lock_token
        entries.append(entry)
    return Response(200, "OK", {"messages": entries})


_OPERATIONS: dict[str, Callable[[Queue, Mapping[str, object], int], Response]] = {
    "peek-message": _peek,
    "renew-lock": _renew_lock,
    "schedule-message": _schedule,
    "cancel-scheduled-message": _cancel_scheduled,
    "update-disposition": _update_disposition,
    "receive-by-sequence-number": _receive_by_sequence_number,
}


def _array(amqp_type: int, values: list[int]) -> Array:
    """An AMQP array (what Service Bus returns for lists of numbers and times)."""
    return Array(UNDESCRIBED, amqp_type, *values)  # type: ignore[arg-type]  # proton's hint omits UNDESCRIBED


def _refuse_dead_letter_queue(queue: Queue, action: str) -> None:
    if queue.is_dead_letter_queue:
        raise NotAllowedError(f"Cannot {action} on a dead-letter queue.")


def _lock_tokens(body: Mapping[str, object]) -> list[uuid.UUID]:
    tokens = []
    for token in _list(body, "lock-tokens"):
        try:
            tokens.append(token if isinstance(token, uuid.UUID) else uuid.UUID(str(token)))
        except ValueError:
            raise BadRequestError(f"{token!r} is not a lock token.") from None
    return tokens


def _list(body: Mapping[str, object], key: str) -> list[object]:
    value = body.get(key)
    if isinstance(value, Array):
        return list(value.elements)
    if isinstance(value, (list, tuple)):
        return list(value)
    raise BadRequestError(f"The request needs {key!r} as a list.")


def _int(body: Mapping[str, object], key: str) -> int:
    return _as_int(body.get(key), key)


def _as_int(value: object, key: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    raise BadRequestError(f"The request needs {key!r} as a number.")
