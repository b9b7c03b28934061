"""What a queue holds and reports, without any rule about it: a message and its state, a settlement outcome, the
counts Service Bus names, and the `Journal` every state change is written through before it is acknowledged.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Protocol

DEAD_LETTER_SUFFIX = "/$DeadLetterQueue"
MAX_DELIVERY_COUNT_EXCEEDED = "MaxDeliveryCountExceeded"
TTL_EXPIRED = "TTLExpiredException"


class MessageState(IntEnum):
    """The values of the `x-opt-message-state` annotation."""

    ACTIVE = 0
    DEFERRED = 1
    SCHEDULED = 2


class Outcome(Enum):
    COMPLETE = "complete"
    ABANDON = "abandon"
    DEFER = "defer"
    DEAD_LETTER = "dead-letter"
    RELEASE = "release"


@dataclass
class QueueMessage:
    sequence_number: int
    payload: bytes
    enqueued_ms: int
    message_id: str | None = None
    ttl_ms: int | None = None
    expires_ms: int | None = None
    state: MessageState = MessageState.ACTIVE
    scheduled_ms: int | None = None
    delivery_count: int = 0
    lock_token: uuid.UUID | None = None
    locked_until_ms: int | None = None
    dead_letter_reason: str | None = None
    dead_letter_description: str | None = None


@dataclass(frozen=True)
class MessageCounts:
    """A queue's runtime counts, named as Service Bus names them (`active_message_count`, ...)."""

    active_message_count: int
    scheduled_message_count: int
    dead_letter_message_count: int
    locked_message_count: int  # stand-in extra: peek-locked, not yet settled (in `active` or not, see the option)
    deferred_message_count: int  # stand-in extra: deferred messages are in no Service Bus count but the total
    total_message_count: int


@dataclass(frozen=True)
class EnqueueResult:
    sequence_number: int
    duplicate: bool = False


class Journal(Protocol):
    """Where queue state is made durable; every method is called before the change is acknowledged."""

    def add(self, entity: str, message: QueueMessage) -> None: ...

    def update(self, entity: str, message: QueueMessage) -> None: ...

    def delete(self, entity: str, sequence_number: int) -> None: ...

    def save_next_sequence(self, entity: str, next_sequence: int) -> None: ...

    def save_seen_id(self, entity: str, message_id: str, seen_ms: int, sequence_number: int) -> None: ...

    def delete_seen_id(self, entity: str, message_id: str) -> None: ...


def expiry(start_ms: int, ttl_ms: int | None) -> int | None:
    """When a message that became available at `start_ms` expires (None: never)."""
    return None if ttl_ms is None else start_ms + ttl_ms


def dead_letter_name(entity: str) -> str:
    return entity + DEAD_LETTER_SUFFIX
