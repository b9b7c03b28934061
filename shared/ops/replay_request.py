"""The body of `POST /api/poison/replay`, checked (pure): what to replay is always named, no field takes null.

`{"batch_id"}`, `{"message_ids"}` (or both) or `{"all": true}` alone, with optional `"limit"`, `"rate"` and
`"background"`. An empty body, `{}`, a body naming only options, and a null in any field are a 400 naming the
problem: a null never widens a replay to every tenant's parked chunks (issue 36 item 15). The same depth limit
and errors as the submit route (a deep body is a 400 that names MAX_JSON_DEPTH, never a RecursionError).
"""

from __future__ import annotations

import re
from typing import Any

from shared.batch.batches import is_batch_id
from shared.core.errors import LimitExceeded, MalformedRequest
from shared.intake.body import Limits, check_depth, loads

MAX_REPLAY_BODY_BYTES = 2**20  # 1,000 message ids and a batch id fit many times over
MESSAGE_ID = re.compile(r"[A-Za-z0-9-]{1,64}")  # a queue message id: a GUID on Azure and on Azurite
MAX_REPLAY_RATE = 1000  # chunks per second: beyond this, pacing does nothing a plain replay would not

REPLAY_FIELDS = ("all", "batch_id", "message_ids", "limit", "rate", "background")
REPLAY_SHAPE = (
    '"batch_id" (a batch\'s parked chunks), "message_ids" (those parked messages) or "all": true (every parked '
    'chunk of every tenant), and optional "limit", "rate", "background"'
)
WHAT_TO_REPLAY = f"name what to replay: {REPLAY_SHAPE}"


def replay_request(body: bytes, limits: Limits) -> dict[str, Any]:
    """The keyword arguments of `shared.ops.replay.replay` (and `background`) the body asks for; a 400 or 413
    for anything else (the module's docstring says what)."""
    if not body.strip():
        raise MalformedRequest(WHAT_TO_REPLAY)
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
    if not isinstance(doc, dict) or set(doc) - set(REPLAY_FIELDS):
        raise MalformedRequest(f"body must be an object with {REPLAY_SHAPE}")
    nulls = [name for name in REPLAY_FIELDS if name in doc and doc[name] is None]
    if nulls:  # null must not silently mean "everything", "in the foreground" or "the default"
        raise MalformedRequest(f'"{nulls[0]}" must not be null: leave it out, or give it a value')
    if "all" in doc and doc["all"] is not True:
        raise MalformedRequest('"all" must be true (or left out, naming "batch_id" or "message_ids" instead)')
    out: dict[str, Any] = {}
    if "batch_id" in doc:
        if not isinstance(doc["batch_id"], str) or not is_batch_id(doc["batch_id"]):
            raise MalformedRequest('"batch_id" must be a batch id (32 lowercase hex digits)')
        out["batch_id"] = doc["batch_id"]
    if "message_ids" in doc:
        ids = doc["message_ids"]
        if not isinstance(ids, list) or not all(isinstance(i, str) and MESSAGE_ID.fullmatch(i) for i in ids):
            raise MalformedRequest('"message_ids" must be a list of message ids (letters, digits and dashes)')
        if len(ids) > 1000:
            raise MalformedRequest('"message_ids" must be a list of at most 1000 message ids')
        out["message_ids"] = set(ids)
    if "limit" in doc:
        limit = doc["limit"]
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 10_000:
            raise MalformedRequest('"limit" must be an integer from 1 to 10000')
        out["limit"] = limit
    if "rate" in doc:
        out["rate"] = replay_rate(doc["rate"])
    if "background" in doc:
        if not isinstance(doc["background"], bool):
            raise MalformedRequest('"background" must be true or false')
        out["background"] = doc["background"]
    named = [name for name in ("all", "batch_id", "message_ids") if name in doc]
    if len(named) != 1 and named != ["batch_id", "message_ids"]:
        raise MalformedRequest(
            WHAT_TO_REPLAY if not named else '"all" cannot be combined with "batch_id" or "message_ids"'
        )
    return out


def replay_rate(rate: Any) -> float:
    """Chunks per second, more than 0 and at most MAX_REPLAY_RATE."""
    if not isinstance(rate, int | float) or isinstance(rate, bool) or not 0 < rate <= MAX_REPLAY_RATE:
        raise MalformedRequest(f'"rate" must be a number of chunks per second above 0, at most {MAX_REPLAY_RATE}')
    return float(rate)
