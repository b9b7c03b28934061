"""What a queue is and holds, without any rule about it: its properties, a message and its state, a settlement
outcome, the counts Service Bus names, and the `Journal` every state change is written through before it is
acknowledged.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Protocol

# Real Service Bus defaults (what an entity gets when the config leaves a property out).
DEFAULT_MAX_DELIVERY_COUNT = 10
DEFAULT_LOCK_DURATION_MS = 60_000
DEFAULT_DUPLICATE_WINDOW_MS = 10 * 60_000

DEAD_LETTER_SUFFIX = "/$DeadLetterQueue"
MAX_DELIVERY_COUNT_EXCEEDED = "MaxDeliveryCountExceeded"
TTL_EXPIRED = "TTLExpiredException"


@dataclass(frozen=True)
class QueueProperties:
    """How one queue behaves; durations in milliseconds, `None` TTL means messages never expire."""

    max_delivery_count: int = DEFAULT_MAX_DELIVERY_COUNT
    lock_duration_ms: int = DEFAULT_LOCK_DURATION_MS
    default_ttl_ms: int | None = None
    dead_letter_on_expiration: bool = False
    requires_duplicate_detection: bool = False
    duplicate_window_ms: int = DEFAULT_DUPLICATE_WINDOW_MS


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
