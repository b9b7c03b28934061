"""The request/response nodes beside the queues: `$cbs` (tokens) and `<queue>/$management` (operations).

A request arrives as an AMQP message on the node's receiving link; the reply goes back on the node's sending
link with `correlation-id` set to the request's `message-id`. `$cbs` answers with `status-code` and
`status-description`; `$management` with `statusCode`, `statusDescription` and `errorCondition` (the SDK reads
the two spellings).
"""

from __future__ import annotations

import logging
from typing import Any

from proton import Message, int32

from emulators.servicebus import cbs, codec, management
from emulators.servicebus.entities import Queue
from emulators.servicebus.errors import AmqpError

log = logging.getLogger(__name__)

ACCEPTED = 202


def decode_request(payload: bytes) -> Message:
    request = Message()
    try:
        request.decode(payload)
    except Exception as e:  # proton raises several types for undecodable input
        raise codec.MalformedMessageError(f"undecodable request: {e}") from e
    return request


def application_properties(request: Message) -> dict[str, object]:
    properties: dict[Any, Any] = request.properties or {}
    return {str(key): value for key, value in properties.items()}


def put_token(request: Message, now_s: float, who: str) -> tuple[Message, cbs.Grant | None]:
    """Check the token a client puts on `$cbs`: the reply, and what the token grants (None if refused)."""
    properties = application_properties(request)
    try:
        grant = cbs.put_token(properties, request.body, now_s)
    except AmqpError as e:
        log.warning("%s: token for %s refused: %s", who, properties.get("name"), e.description)
        return _reply(request, {"status-code": int32(e.status_code), "status-description": e.description}), None
    log.debug("%s: token accepted for %s", who, properties.get("name"))
    return _reply(request, {"status-code": int32(ACCEPTED), "status-description": "Accepted"}), grant


def manage(request: Message, queue: Queue, now_ms: int) -> Message:
    """Run one `$management` operation on `queue`; failures are replies with a status code, not exceptions."""
    properties = application_properties(request)
    body = codec.owned(request.body)
    arguments = {str(key): value for key, value in body.items()} if isinstance(body, dict) else {}
    result = management.handle(queue, str(properties.get("operation", "")), arguments, now_ms)
    status = {"statusCode": int32(result.status_code), "statusDescription": result.description}
    if result.condition is not None:
        status["errorCondition"] = result.condition
    return _reply(request, status, result.body)


def _reply(request: Message, status: dict[str, object], body: Any = None) -> Message:
    reply = Message(body=body, properties=status)
    reply.correlation_id = request.id
    return reply
