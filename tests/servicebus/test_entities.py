"""Queue rules tested directly, without AMQP: time is a number passed in, the journal is the real SQLite store."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulators.servicebus.entities import Queue, new_queue
from emulators.servicebus.errors import MessageLockLostError, MessageNotFoundError
from emulators.servicebus.messages import MessageState, Outcome, QueueMessage, QueueProperties
from emulators.servicebus.store import MemoryStore, SqliteStore

LOCK_MS = 1_000


def queue(**properties: object) -> Queue:
    return new_queue("q", QueueProperties(lock_duration_ms=LOCK_MS, **properties), MemoryStore())  # type: ignore[arg-type]


def receive_locked(q: Queue, now_ms: int) -> QueueMessage:
    """The next message, which must be there, locked."""
    message = q.receive(now_ms, lock=True)
    assert message is not None
    assert message.lock_token is not None
    return message


def test_messages_are_handed_out_in_sequence_order_and_each_to_one_receiver() -> None:
    q = queue()
    numbers = [q.enqueue(f"m{i}".encode(), 0).sequence_number for i in range(3)]
    got = [q.receive(1, lock=True) for _ in range(4)]
    assert numbers == [1, 2, 3]
    assert [m.sequence_number if m else None for m in got] == [1, 2, 3, None]


def test_a_lock_expires_at_its_deadline_and_counts_as_a_failed_delivery() -> None:
    q = queue()
    q.enqueue(b"x", 0)
    first = receive_locked(q, 0)
    token = first.lock_token
    assert q.receive(LOCK_MS - 1, lock=True) is None
    again = q.receive(LOCK_MS, lock=True)
    assert again is not None
    assert again.delivery_count == 1
    assert again.lock_token != token
    with pytest.raises(MessageLockLostError):
        q.settle(token, Outcome.COMPLETE, LOCK_MS + 1)


def test_renewal_moves_the_deadline() -> None:
    q = queue()
    q.enqueue(b"x", 0)
    message = receive_locked(q, 0)
    assert q.renew_lock(message.lock_token, 900) == 900 + LOCK_MS
    assert q.receive(LOCK_MS + 100, lock=True) is None
    q.settle(message.lock_token, Outcome.COMPLETE, 1_800)
    assert len(q) == 0


def test_max_delivery_count_dead_letters_with_its_reason() -> None:
    q = queue(max_delivery_count=2)
    q.enqueue(b"x", 0)
    for now in (0, 1):
        message = receive_locked(q, now)
        q.settle(message.lock_token, Outcome.ABANDON, now)
    assert q.receive(2, lock=True) is None
    assert q.dead_letter_queue is not None
    [letter] = q.dead_letter_queue.peek(0, 10, 2)
    assert (letter.dead_letter_reason, letter.delivery_count) == ("MaxDeliveryCountExceeded", 2)


def test_release_returns_a_message_without_counting_a_delivery() -> None:
    q = queue()
    q.enqueue(b"x", 0)
    message = receive_locked(q, 0)
    q.settle(message.lock_token, Outcome.RELEASE, 1)
    again = q.receive(2, lock=True)
    assert again is not None
    assert again.delivery_count == 0


def test_a_scheduled_message_becomes_active_at_its_time_and_its_ttl_starts_then() -> None:
    q = queue(default_ttl_ms=500)
    q.enqueue(b"x", 0, scheduled_ms=10_000)
    assert q.receive(9_999, lock=True) is None
    [peeked] = q.peek(0, 5, 9_999)
    assert peeked.state == MessageState.SCHEDULED
    message = q.receive(10_400, lock=False)
    assert message is not None
    assert message.enqueued_ms == 10_000


def test_ttl_is_the_smaller_of_message_and_queue_default_and_expiry_can_dead_letter() -> None:
    q = queue(default_ttl_ms=1_000, dead_letter_on_expiration=True)
    q.enqueue(b"short", 0, ttl_ms=100)
    q.enqueue(b"capped", 0, ttl_ms=60_000)
    assert q.advance(1_000) is False
    assert len(q) == 0
    assert q.dead_letter_queue is not None
    assert [m.dead_letter_reason for m in q.dead_letter_queue.peek(0, 5, 1_000)] == ["TTLExpiredException"] * 2


def test_a_locked_message_does_not_expire_until_its_lock_ends() -> None:
    q = queue()
    q.enqueue(b"x", 0, ttl_ms=100)
    message = receive_locked(q, 50)
    q.settle(message.lock_token, Outcome.COMPLETE, 500)  # past its TTL, but the lock still holds
    assert len(q) == 0


def test_duplicates_are_dropped_inside_the_window_only() -> None:
    q = queue(requires_duplicate_detection=True, duplicate_window_ms=1_000)
    first = q.enqueue(b"a", 0, message_id="id")
    duplicate = q.enqueue(b"b", 999, message_id="id")
    later = q.enqueue(b"c", 1_000, message_id="id")
    assert (duplicate.duplicate, duplicate.sequence_number) == (True, first.sequence_number)
    assert not later.duplicate
    assert [m.payload for m in q.peek(0, 5, 1_000)] == [b"a", b"c"]


def test_deferred_messages_are_received_only_by_sequence_number() -> None:
    q = queue()
    q.enqueue(b"x", 0)
    message = receive_locked(q, 0)
    q.settle(message.lock_token, Outcome.DEFER, 1)
    assert q.receive(2, lock=True) is None
    with pytest.raises(MessageNotFoundError):
        q.receive_deferred([99], 2, lock=True)
    [deferred] = q.receive_deferred([message.sequence_number], 2, lock=True)
    assert deferred.lock_token is not None
    q.settle(deferred.lock_token, Outcome.ABANDON, 3)  # stays deferred
    assert q.receive(4, lock=True) is None
    assert q.peek(0, 1, 4)[0].state == MessageState.DEFERRED


def test_cancel_refuses_numbers_that_are_not_scheduled() -> None:
    q = queue()
    active = q.enqueue(b"x", 0).sequence_number
    scheduled = q.enqueue(b"y", 0, scheduled_ms=5_000).sequence_number
    with pytest.raises(MessageNotFoundError, match=str(active)):
        q.cancel_scheduled([active, scheduled], 1)
    q.cancel_scheduled([scheduled], 1)
    assert [m.sequence_number for m in q.peek(0, 5, 1)] == [active]


# One step of a random workload: (action, argument) over a queue with a short lock and few deliveries.
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["send", "schedule", "receive", "complete", "abandon", "defer", "dead", "release", "wait"]),
        st.integers(min_value=0, max_value=3_000),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(steps=STEPS)
def test_no_message_is_lost_or_duplicated_whatever_clients_do(steps: list[tuple[str, int]]) -> None:
    """Every sent message is at every moment in exactly one place: the queue, its dead-letter queue, or done."""
    q = queue(max_delivery_count=3, default_ttl_ms=20_000, dead_letter_on_expiration=True)
    assert q.dead_letter_queue is not None
    now, sent, done = 0, set(), set()
    held: list[uuid.UUID] = []
    for action, n in steps:
        if action == "send":
            sent.add(q.enqueue(b"m", now).sequence_number)
        elif action == "schedule":
            sent.add(q.enqueue(b"s", now, scheduled_ms=now + n).sequence_number)
        elif action == "receive":
            message = q.receive(now, lock=True)
            if message is not None and message.lock_token is not None:
                held.append(message.lock_token)
        elif action == "wait":
            now += n
        elif held:
            token = held.pop(n % len(held))
            outcome = {
                "complete": Outcome.COMPLETE,
                "abandon": Outcome.ABANDON,
                "defer": Outcome.DEFER,
                "dead": Outcome.DEAD_LETTER,
                "release": Outcome.RELEASE,
            }[action]
            try:
                settled = {m.sequence_number for m in q.peek(0, 1_000, now) if m.lock_token == token}
                q.settle(token, outcome, now)
                if outcome is Outcome.COMPLETE:
                    done |= settled
            except MessageLockLostError:
                pass  # its lock expired meanwhile: the message went back, nothing was settled
        in_queue = [m.sequence_number for m in q.peek(0, 1_000, now)]
        in_dead_letters = [m.sequence_number for m in q.dead_letter_queue.peek(0, 1_000, now)]
        everywhere = in_queue + in_dead_letters + sorted(done)
        assert sorted(everywhere) == sorted(sent)
        for message in q.peek(0, 1_000, now):
            assert message.delivery_count < 3


def test_the_sqlite_journal_restores_exactly_what_the_queue_held(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path)
    properties = QueueProperties(lock_duration_ms=LOCK_MS, requires_duplicate_detection=True)
    q = new_queue("q", properties, store)
    q.enqueue(b"active", 0, message_id="a")
    q.enqueue(b"scheduled", 0, scheduled_ms=50_000)
    locked = receive_locked(q, 10)
    store.commit()
    store.close()

    reopened = SqliteStore(tmp_path)
    states = reopened.load()
    restored = new_queue("q", properties, reopened)
    restored.restore(states["q"].messages, states["q"].next_sequence, states["q"].seen_ids)
    assert [(m.payload, m.state, m.lock_token) for m in restored.peek(0, 10, 20)] == [
        (b"active", MessageState.ACTIVE, locked.lock_token),
        (b"scheduled", MessageState.SCHEDULED, None),
    ]
    restored.settle(locked.lock_token, Outcome.COMPLETE, 20)  # the lock survived the restart
    assert restored.enqueue(b"again", 30, message_id="a").duplicate
    assert restored.enqueue(b"new", 30).sequence_number == 3
    reopened.close()
