"""Trigger events: the Service Bus doorbell that says which storage queue has work (pure).

Service Bus only rings; the work itself lives in the storage queue. Body (JSON):
    {"account", "queue", "reason", "payload_size", "batch_id"?, "slot"?, "job"?, "token"?, "ready_ms"?, "attempt"?,
     "scheduled"?}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any

from shared.core.errors import MalformedEvent
from shared.core.settings import QUEUE_NAME

MAX_EVENT_BYTES = 4096


class Reason(str, Enum):
    SUBMITTED = "submitted"  # a batch was accepted
    CONTINUE = "continue"  # a drainer ran out of time with work left
    RETRY_DUE = "retry-due"  # messages delayed for a retry are visible again
    WATCHDOG = "watchdog"  # a drainer may have died holding its lease
    SCALE_OUT = "scale-out"  # a deep queue recruits another drainer (slot given)
    FALLBACK = "fallback"  # the timer found work that no event announced
    REPLAY = "replay"  # an operator put parked chunks back on the queue
    REPLAY_STEP = "replay-step"  # the next step of a background replay job (`job` names it)
    LOOK = "look"  # the fallback's scheduled look at a queue that holds messages (`token` names it)
    NOTIFY = "notify"  # a batch's completion notice is due (`batch_id` names the batch; shared.ops.notices)
    PROBE = "probe"  # the deployment's smoke probe (`token` names it; shared.ops.probe)


@dataclass(frozen=True)
class TriggerEvent:
    account: str
    queue: str
    reason: Reason
    payload_size: int = 0
    batch_id: str | None = None
    slot: int = 0  # which drain lease slot the event asks for (scale-out recruits slots 1..N-1)
    job: str | None = None  # the background replay job a `replay-step` event advances
    token: str | None = None  # the look a `look` event is (shared.watch.lookout)
    # a doorbell's: when (the sender's wall clock, ms) the work it announces was stored and visible; a look at the
    # partition that began later covers it (shared.engine.serve)
    ready_ms: int | None = None
    # a doorbell's: the attempt its submit committed and indexed, so the drainer it reaches admits the batch's
    # chunks with no manifest read (a lane's mark names only the latest batch; overlapping submits hide the others)
    attempt: str | None = None
    # a doorbell's: rung for a batch's not_before, its chunks hidden until `ready_ms` (a look that saw its lane's
    # mark before then does not cover it: shared.engine.serve)
    scheduled: bool = False

    def encode(self) -> bytes:
        body: dict[str, Any] = {
            "account": self.account,
            "queue": self.queue,
            "reason": self.reason.value,
            "payload_size": self.payload_size,
        }
        if self.batch_id is not None:
            body["batch_id"] = self.batch_id
        if self.slot:
            body["slot"] = self.slot
        if self.job is not None:
            body["job"] = self.job
        if self.token is not None:
            body["token"] = self.token
        if self.ready_ms is not None:
            body["ready_ms"] = self.ready_ms
        if self.attempt is not None:
            body["attempt"] = self.attempt
        if self.scheduled:
            body["scheduled"] = True
        return json.dumps(body, separators=(",", ":")).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes) -> TriggerEvent:
        if len(data) > MAX_EVENT_BYTES:
            raise MalformedEvent(f"event is {len(data)} bytes, more than {MAX_EVENT_BYTES}")
        try:
            doc = json.loads(data)
        except ValueError as e:
            raise MalformedEvent(f"event body is not JSON: {e}") from None
        if not isinstance(doc, dict):
            raise MalformedEvent("event body is not a JSON object")
        return cls(
            account=_text(doc, "account"),
            queue=_queue(doc),
            reason=_reason(doc),
            payload_size=_count(doc, "payload_size"),
            batch_id=_optional_text(doc, "batch_id"),
            slot=_count(doc, "slot"),
            job=_optional_text(doc, "job"),
            token=_optional_text(doc, "token"),
            ready_ms=_count(doc, "ready_ms") if "ready_ms" in doc else None,
            attempt=_attempt(doc),
            scheduled=_flag(doc, "scheduled"),
        )


def _text(doc: dict[str, Any], key: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value or len(value) > 256:
        raise MalformedEvent(f"event field {key!r} must be a non-empty string")
    return value


def _optional_text(doc: dict[str, Any], key: str) -> str | None:
    return None if doc.get(key) is None else _text(doc, key)


def _attempt(doc: dict[str, Any]) -> str | None:
    attempt = _optional_text(doc, "attempt")
    if attempt is not None and not (attempt.isascii() and attempt.isalnum() and len(attempt) <= 64):
        raise MalformedEvent("event field 'attempt' must be at most 64 letters and digits")
    if attempt is not None and doc.get("batch_id") is None:
        raise MalformedEvent("event field 'attempt' names the attempt of a batch: 'batch_id' must be given too")
    return attempt


def _flag(doc: dict[str, Any], key: str) -> bool:
    value = doc.get(key, False)
    if not isinstance(value, bool):
        raise MalformedEvent(f"event field {key!r} must be true or false")
    return value


def _queue(doc: dict[str, Any]) -> str:
    queue = _text(doc, "queue")
    if not QUEUE_NAME.match(queue):
        raise MalformedEvent(f"event field 'queue' is not a storage queue name: {queue[:64]!r}")
    return queue


def _reason(doc: dict[str, Any]) -> Reason:
    try:
        return Reason(doc.get("reason"))
    except ValueError:
        raise MalformedEvent(f"event field 'reason' is not one of {[r.value for r in Reason]}") from None


def _count(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise MalformedEvent(f"event field {key!r} must be a non-negative integer")
    return value
