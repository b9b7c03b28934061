"""Queue semantics without any AMQP: locks, delivery counts, dead-lettering, TTL, scheduling, deferral, duplicates.

Every operation takes `now_ms` (wall-clock milliseconds) instead of reading a clock, so the rules can be
tested directly. Each state change is written through a `Journal` (memory: nothing; SQLite: a row) before
the caller acknowledges anything.
"""

from __future__ import annotations

import heapq
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from emulators.servicebus.errors import MessageLockLostError, MessageNotFoundError
from emulators.servicebus.messages import (
    MAX_DELIVERY_COUNT_EXCEEDED,
    TTL_EXPIRED,
    EnqueueResult,
    Journal,
    MessageCounts,
    MessageState,
    Outcome,
    QueueMessage,
    QueueProperties,
    dead_letter_name,
    expiry,
)

_LOCK_LOST = (
    "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue."
)


@dataclass
class _Seen:
    seen_ms: int
    sequence_number: int


@dataclass
class Queue:
    """One queue (or its dead-letter subqueue) and every rule about its messages."""

    name: str
    properties: QueueProperties
    journal: Journal
    dead_letter_queue: Queue | None = None
    _messages: dict[int, QueueMessage] = field(default_factory=dict, repr=False)
    _ready: list[int] = field(default_factory=list, repr=False)  # heap of sequence numbers that may be available
    _deadlines: list[tuple[int, int]] = field(default_factory=list, repr=False)  # heap of (due ms, sequence number)
    _locks: dict[uuid.UUID, int] = field(default_factory=dict, repr=False)
    _seen: OrderedDict[str, _Seen] = field(default_factory=OrderedDict, repr=False)
    _next_sequence: int = 1

    @property
    def is_dead_letter_queue(self) -> bool:
        return self.dead_letter_queue is None

    def __len__(self) -> int:
        return len(self._messages)

    # --- restoring state -------------------------------------------------------------------------

    def restore(
        self, messages: Iterable[QueueMessage], next_sequence: int, seen: Iterable[tuple[str, int, int]]
    ) -> None:
        """Load state written by an earlier run (no journal writes)."""
        for message in messages:
            self._messages[message.sequence_number] = message
            if message.lock_token is not None:
                self._locks[message.lock_token] = message.sequence_number
            self._track(message)
        self._next_sequence = max([next_sequence, *(seq + 1 for seq in self._messages)])
        for message_id, seen_ms, sequence_number in sorted(seen, key=lambda item: item[1]):
            self._seen[message_id] = _Seen(seen_ms, sequence_number)

    # --- sending ---------------------------------------------------------------------------------

    def enqueue(
        self,
        payload: bytes,
        now_ms: int,
        *,
        message_id: str | None = None,
        ttl_ms: int | None = None,
        scheduled_ms: int | None = None,
    ) -> EnqueueResult:
        """Accept one message; a duplicate `message_id` inside the detection window is dropped, not stored."""
        self.advance(now_ms)
        if self.properties.requires_duplicate_detection and message_id is not None:
            self._forget_old_ids(now_ms)
            seen = self._seen.get(message_id)
            if seen is not None:
                return EnqueueResult(seen.sequence_number, duplicate=True)
        sequence_number = self._next_sequence
        self._next_sequence += 1
        self.journal.save_next_sequence(self.name, self._next_sequence)
        message = QueueMessage(sequence_number, payload, now_ms, message_id, self._effective_ttl(ttl_ms))
        if scheduled_ms is not None and scheduled_ms > now_ms:
            message.state = MessageState.SCHEDULED
            message.scheduled_ms = scheduled_ms
        else:
            message.expires_ms = expiry(now_ms, message.ttl_ms)
        self._messages[sequence_number] = message
        self.journal.add(self.name, message)
        if self.properties.requires_duplicate_detection and message_id is not None:
            self._seen[message_id] = _Seen(now_ms, sequence_number)
            self.journal.save_seen_id(self.name, message_id, now_ms, sequence_number)
        self._track(message)
        return EnqueueResult(sequence_number)

    def cancel_scheduled(self, sequence_numbers: Iterable[int], now_ms: int) -> None:
        self.advance(now_ms)
        numbers = list(sequence_numbers)
        missing = [n for n in numbers if self._scheduled(n) is None]
        if missing:
            raise MessageNotFoundError(f"Messages not found. Missing sequence numbers: {', '.join(map(str, missing))}")
        for number in numbers:
            self._remove(self._messages[number])

    # --- receiving -------------------------------------------------------------------------------

    def receive(self, now_ms: int, *, lock: bool) -> QueueMessage | None:
        """The next available message: locked (peek-lock) or removed (receive-and-delete); None when empty."""
        self.advance(now_ms)
        while self._ready:
            message = self._messages.get(heapq.heappop(self._ready))
            if message is None or not self._available(message):
                continue
            if self._expired(message, now_ms):
                self._expire(message)
                continue
            return self._hand_out(message, now_ms, lock=lock)
        return None

    def receive_deferred(self, sequence_numbers: Iterable[int], now_ms: int, *, lock: bool) -> list[QueueMessage]:
        self.advance(now_ms)
        numbers = list(sequence_numbers)
        found = [self._messages.get(n) for n in numbers]
        missing = [n for n, m in zip(numbers, found, strict=True) if m is None or m.state != MessageState.DEFERRED]
        if missing:
            raise MessageNotFoundError(
                f"Failed to retrieve deferred messages; sequence numbers not found: {', '.join(map(str, missing))}"
            )
        locked = [n for n, m in zip(numbers, found, strict=True) if m is not None and m.lock_token is not None]
        if locked:
            raise MessageNotFoundError(f"Deferred messages are locked by another receiver: {locked}")
        return [self._hand_out(m, now_ms, lock=lock) for m in found if m is not None]

    def counts(self, now_ms: int, *, locked_counts_as_active: bool = True) -> MessageCounts:
        """Active, scheduled and dead-letter counts as Service Bus reports them.

        Service Bus keeps a peek-locked message in the queue until it is settled, so by default it counts
        as active; `locked_counts_as_active=False` counts only messages a receiver could take right now.
        """
        self.advance(now_ms)
        messages = list(self._messages.values())
        locked = sum(1 for m in messages if m.state == MessageState.ACTIVE and m.lock_token is not None)
        active = sum(1 for m in messages if m.state == MessageState.ACTIVE)
        dead_letters = len(self.dead_letter_queue) if self.dead_letter_queue is not None else 0
        return MessageCounts(
            active_message_count=active if locked_counts_as_active else active - locked,
            scheduled_message_count=sum(1 for m in messages if m.state == MessageState.SCHEDULED),
            dead_letter_message_count=dead_letters,
            locked_message_count=locked,
            deferred_message_count=sum(1 for m in messages if m.state == MessageState.DEFERRED),
            total_message_count=len(messages) + dead_letters,
        )

    def peek(self, from_sequence: int, count: int, now_ms: int) -> list[QueueMessage]:
        """Up to `count` messages from `from_sequence` on, in sequence order, locked or not; nothing changes."""
        self.advance(now_ms)
        numbers = heapq.nsmallest(max(count, 0), (n for n in self._messages if n >= from_sequence))
        return [self._messages[n] for n in numbers]

    # --- settling --------------------------------------------------------------------------------

    def settle(
        self,
        lock_token: uuid.UUID,
        outcome: Outcome,
        now_ms: int,
        *,
        reason: str | None = None,
        description: str | None = None,
    ) -> None:
        message = self._locked(lock_token, now_ms)
        self._unlock(message)
        if outcome is Outcome.COMPLETE:
            self._remove(message)
        elif outcome is Outcome.DEAD_LETTER:
            self._dead_letter(message, reason, description)
        elif outcome is Outcome.DEFER:
            message.state = MessageState.DEFERRED
            self.journal.update(self.name, message)
        else:
            self._return(message, now_ms, failed=outcome is Outcome.ABANDON)

    def renew_lock(self, lock_token: uuid.UUID, now_ms: int) -> int:
        message = self._locked(lock_token, now_ms)
        message.locked_until_ms = now_ms + self.properties.lock_duration_ms
        self.journal.update(self.name, message)
        heapq.heappush(self._deadlines, (message.locked_until_ms, message.sequence_number))
        return message.locked_until_ms

    def is_locked(self, lock_token: uuid.UUID, now_ms: int) -> bool:
        self.advance(now_ms)
        return lock_token in self._locks

    # --- time ------------------------------------------------------------------------------------

    def advance(self, now_ms: int) -> bool:
        """Apply everything due by `now_ms`: lock expiry, scheduled activation, TTL; True if a message freed up."""
        freed = False
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            _, sequence_number = heapq.heappop(self._deadlines)
            message = self._messages.get(sequence_number)
            if message is not None:
                freed = self._apply_due(message, now_ms) or freed
        return freed

    def next_deadline_ms(self) -> int | None:
        return self._deadlines[0][0] if self._deadlines else None

    def _apply_due(self, message: QueueMessage, now_ms: int) -> bool:
        if message.locked_until_ms is not None and message.locked_until_ms <= now_ms:
            self._unlock(message)
            return self._return(message, now_ms, failed=True)
        if message.state == MessageState.SCHEDULED and message.scheduled_ms is not None:
            if message.scheduled_ms > now_ms:
                return False
            message.state = MessageState.ACTIVE
            message.enqueued_ms = message.scheduled_ms
            message.scheduled_ms = None
            message.expires_ms = expiry(message.enqueued_ms, message.ttl_ms)
            self.journal.update(self.name, message)
            self._track(message)
            return True
        if message.lock_token is None and self._expired(message, now_ms):
            self._expire(message)
        return False

    # --- internals -------------------------------------------------------------------------------

    def _hand_out(self, message: QueueMessage, now_ms: int, *, lock: bool) -> QueueMessage:
        if not lock:
            self._remove(message)
            return message
        message.lock_token = uuid.uuid4()
        message.locked_until_ms = now_ms + self.properties.lock_duration_ms
        self._locks[message.lock_token] = message.sequence_number
        self.journal.update(self.name, message)
        heapq.heappush(self._deadlines, (message.locked_until_ms, message.sequence_number))
        return message

    def _locked(self, lock_token: uuid.UUID, now_ms: int) -> QueueMessage:
        self.advance(now_ms)
        sequence_number = self._locks.get(lock_token)
        if sequence_number is None:
            raise MessageLockLostError(_LOCK_LOST)
        return self._messages[sequence_number]

    def _unlock(self, message: QueueMessage) -> None:
        if message.lock_token is not None:
            self._locks.pop(message.lock_token, None)
        message.lock_token = None
        message.locked_until_ms = None

    def _return(self, message: QueueMessage, now_ms: int, *, failed: bool) -> bool:
        """A message comes back after abandon, release or lock expiry; True if it is available again."""
        if failed:
            message.delivery_count += 1
            if not self.is_dead_letter_queue and message.delivery_count >= self.properties.max_delivery_count:
                self._dead_letter(
                    message,
                    MAX_DELIVERY_COUNT_EXCEEDED,
                    f"Message could not be consumed after {self.properties.max_delivery_count} delivery attempts.",
                )
                return False
        if self._expired(message, now_ms):
            self._expire(message)
            return False
        self.journal.update(self.name, message)
        self._make_ready(message)
        return message.state == MessageState.ACTIVE

    def _dead_letter(self, message: QueueMessage, reason: str | None, description: str | None) -> None:
        target = self.dead_letter_queue
        if target is None:  # already in a dead-letter queue: it stays there, available, with the new reason
            message.dead_letter_reason, message.dead_letter_description = reason, description
            message.state = MessageState.ACTIVE
            self.journal.update(self.name, message)
            self._make_ready(message)
            return
        self._remove(message)
        message.state = MessageState.ACTIVE
        message.expires_ms = None  # dead-lettered messages do not expire
        message.scheduled_ms = None
        message.dead_letter_reason, message.dead_letter_description = reason, description
        target.adopt(message)

    def adopt(self, message: QueueMessage) -> None:
        """Take a dead-lettered message, keeping its sequence number."""
        self._messages[message.sequence_number] = message
        self.journal.add(self.name, message)
        self._track(message)

    def _expire(self, message: QueueMessage) -> None:
        if self.properties.dead_letter_on_expiration:
            self._dead_letter(message, TTL_EXPIRED, "The message expired and was dead lettered.")
        else:
            self._remove(message)

    def _remove(self, message: QueueMessage) -> None:
        self._unlock(message)
        del self._messages[message.sequence_number]
        self.journal.delete(self.name, message.sequence_number)

    def _track(self, message: QueueMessage) -> None:
        """Remember when a new (or restored) message needs attention, and whether it can be handed out now."""
        self._make_ready(message)
        for due in (message.locked_until_ms, message.scheduled_ms, message.expires_ms):
            if due is not None:
                heapq.heappush(self._deadlines, (due, message.sequence_number))

    def _make_ready(self, message: QueueMessage) -> None:
        if self._available(message):
            heapq.heappush(self._ready, message.sequence_number)

    def _available(self, message: QueueMessage) -> bool:
        return message.state == MessageState.ACTIVE and message.lock_token is None

    def _expired(self, message: QueueMessage, now_ms: int) -> bool:
        return (
            not self.is_dead_letter_queue
            and message.state != MessageState.SCHEDULED
            and message.expires_ms is not None
            and message.expires_ms <= now_ms
        )

    def _scheduled(self, sequence_number: int) -> QueueMessage | None:
        message = self._messages.get(sequence_number)
        return message if message is not None and message.state == MessageState.SCHEDULED else None

    def _effective_ttl(self, ttl_ms: int | None) -> int | None:
        default = self.properties.default_ttl_ms
        if ttl_ms is None or (default is not None and default < ttl_ms):
            return default
        return ttl_ms

    def _forget_old_ids(self, now_ms: int) -> None:
        window = self.properties.duplicate_window_ms
        while self._seen:
            message_id, seen = next(iter(self._seen.items()))
            if seen.seen_ms + window > now_ms:
                break
            del self._seen[message_id]
            self.journal.delete_seen_id(self.name, message_id)


def new_queue(name: str, properties: QueueProperties, journal: Journal) -> Queue:
    """A queue with its dead-letter subqueue (which never expires messages nor counts deliveries against a limit)."""
    dead_letter = Queue(dead_letter_name(name), properties, journal)
    return Queue(name, properties, journal, dead_letter_queue=dead_letter)
