"""Send, receive and settle with the unmodified SDK (sync client) against the stand-in: one message, lists and
batches, properties, complete, abandon, defer, dead-letter, settlement over the management link, receive-and-delete,
prefetch and peek. Locks, schedules, expiry and duplicates are in test_message_times.py.

Each test uses its own queue. Opening an SDK sender or receiver costs about half a second and closing one as much
again (client-side waits), so each test opens few, and opens and closes them side by side (`opened`).
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable

import pytest
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusMessageBatch,
    ServiceBusMessageState,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import MessageNotFoundError

from tests.servicebus.sdk import WAIT_S, nothing_arrives, opened, take, texts, utcnow

pytestmark = pytest.mark.timeout(60)


def test_one_message_is_sent_received_and_completed(client: ServiceBusClient) -> None:
    with opened(client.get_queue_sender("send-one"), client.get_queue_receiver("send-one")) as (sender, receiver):
        sender.send_messages(ServiceBusMessage("hello"))
        [message] = take(receiver, 1, complete=False)
        assert str(message) == "hello"
        assert message.delivery_count == 0
        assert message.sequence_number == 1
        assert message.enqueued_time_utc is not None
        assert utcnow() < message.locked_until_utc < utcnow() + datetime.timedelta(seconds=61)
        receiver.complete_message(message)
        assert nothing_arrives(receiver)


def test_a_list_is_sent_as_one_batch_and_arrives_as_separate_messages_in_order(client: ServiceBusClient) -> None:
    with opened(client.get_queue_sender("send-list"), client.get_queue_receiver("send-list")) as (sender, receiver):
        sender.send_messages([ServiceBusMessage(f"item {i}") for i in range(20)])
        got = take(receiver, 20)
    assert texts(got) == [f"item {i}" for i in range(20)]
    assert [m.sequence_number for m in got] == list(range(1, 21))


def fill(batch: ServiceBusMessageBatch, make: Callable[[], ServiceBusMessage]) -> int:
    """Add messages until the batch refuses one (MessageSizeExceededError, a ValueError); how many fit."""
    added = 0
    while True:
        try:
            batch.add_message(make())
        except ValueError:
            return added
        added += 1


def test_a_message_batch_fills_up_to_256_kb_and_is_delivered_whole(client: ServiceBusClient) -> None:
    with opened(client.get_queue_sender("send-batch"), client.get_queue_receiver("send-batch")) as (sender, receiver):
        batch = sender.create_message_batch()
        assert batch.max_size_in_bytes == 256 * 1024
        added = fill(batch, lambda: ServiceBusMessage(b"x" * 10_000))
        assert 20 <= added <= 26
        sender.send_messages(batch)
        assert len(take(receiver, added)) == added


def test_message_properties_travel_unchanged(client: ServiceBusClient) -> None:
    sent = ServiceBusMessage(
        b'{"k": 1}',
        application_properties={"kind": "trigger", "n": 7, "ok": True},
        content_type="application/json",
        correlation_id="corr-1",
        message_id="mid-1",
        subject="subj",
        to="somewhere",
        reply_to="back",
        time_to_live=datetime.timedelta(minutes=5),
    )
    with opened(client.get_queue_sender("properties"), client.get_queue_receiver("properties")) as (sender, receiver):
        sender.send_messages(sent)
        [got] = take(receiver, 1)
    assert b"".join(got.body) == b'{"k": 1}'
    assert got.application_properties == {b"kind": b"trigger", b"n": 7, b"ok": True}
    assert (got.content_type, got.correlation_id, got.message_id) == ("application/json", "corr-1", "mid-1")
    assert (got.subject, got.to, got.reply_to) == ("subj", "somewhere", "back")
    assert got.time_to_live == datetime.timedelta(minutes=5)
    assert got.expires_at_utc == got.enqueued_time_utc + datetime.timedelta(minutes=5)


def test_completed_messages_are_gone_and_abandoned_ones_come_back_with_a_new_lock(client: ServiceBusClient) -> None:
    with opened(client.get_queue_sender("complete"), client.get_queue_receiver("complete")) as (sender, receiver):
        sender.send_messages([ServiceBusMessage("done"), ServiceBusMessage("again")])
        done, again = take(receiver, 2, complete=False)
        first_token = again.lock_token
        receiver.complete_message(done)
        receiver.abandon_message(again)
        [back] = take(receiver, 1, complete=False)
        assert str(back) == "again"
        assert isinstance(back.lock_token, uuid.UUID)
        assert back.lock_token != first_token
        receiver.complete_message(back)
        assert receiver.peek_messages(max_message_count=10, sequence_number=1) == []


def test_abandon_increments_the_delivery_count_each_time(client: ServiceBusClient) -> None:
    with opened(client.get_queue_sender("abandon"), client.get_queue_receiver("abandon")) as (sender, receiver):
        sender.send_messages(ServiceBusMessage("again"))
        counts = []
        for _ in range(3):
            [message] = take(receiver, 1, complete=False)
            counts.append(message.delivery_count)
            receiver.abandon_message(message)
        [message] = take(receiver, 1)
    assert counts == [0, 1, 2]
    assert message.delivery_count == 3


def test_deferred_message_is_not_redelivered_but_can_be_received_by_sequence_number(client: ServiceBusClient) -> None:
    with opened(client.get_queue_sender("defer"), client.get_queue_receiver("defer")) as (sender, receiver):
        sender.send_messages([ServiceBusMessage("later"), ServiceBusMessage("now")])
        later, now = take(receiver, 2, complete=False)
        receiver.defer_message(later)
        receiver.complete_message(now)
        assert nothing_arrives(receiver)
        # After a receive the SDK peeks from the last received sequence number on, so say where to start.
        [peeked] = receiver.peek_messages(max_message_count=5, sequence_number=1)
        assert peeked.state == ServiceBusMessageState.DEFERRED
        [deferred] = receiver.receive_deferred_messages([later.sequence_number])
        assert str(deferred) == "later"
        assert deferred.lock_token is not None
        assert deferred.locked_until_utc > utcnow()
        receiver.complete_message(deferred)
        assert receiver.peek_messages(max_message_count=5, sequence_number=1) == []
        with pytest.raises(MessageNotFoundError):
            receiver.receive_deferred_messages([later.sequence_number], timeout=2)


def test_dead_lettered_message_carries_reason_and_description_into_the_dead_letter_queue(
    client: ServiceBusClient,
) -> None:
    with opened(
        client.get_queue_sender("dead-letter"),
        client.get_queue_receiver("dead-letter"),
        client.get_queue_receiver("dead-letter", sub_queue=ServiceBusSubQueue.DEAD_LETTER),
    ) as (sender, receiver, dead):
        sender.send_messages(
            [ServiceBusMessage("poison", application_properties={"keep": "me"}), ServiceBusMessage("mute")]
        )
        message, mute = take(receiver, 2, complete=False)
        receiver.dead_letter_message(message, reason="bad-input", error_description="field x is missing")
        receiver.dead_letter_message(mute)
        assert nothing_arrives(receiver)
        letter, silent = take(dead, 2)
        assert nothing_arrives(dead)
    assert str(letter) == "poison"
    assert letter.dead_letter_reason == "bad-input"
    assert letter.dead_letter_error_description == "field x is missing"
    assert letter.application_properties[b"keep"] == b"me"
    assert letter.sequence_number == message.sequence_number
    assert (str(silent), silent.dead_letter_reason, silent.dead_letter_error_description) == ("mute", None, None)


def test_max_delivery_count_moves_the_message_to_the_dead_letter_queue(client: ServiceBusClient) -> None:
    with opened(
        client.get_queue_sender("max-delivery"),
        client.get_queue_receiver("max-delivery"),
        client.get_queue_receiver("max-delivery", sub_queue=ServiceBusSubQueue.DEAD_LETTER),
    ) as (sender, receiver, dead):
        sender.send_messages(ServiceBusMessage("hopeless"))
        for _ in range(3):  # MaxDeliveryCount is 3
            [message] = take(receiver, 1, complete=False)
            receiver.abandon_message(message)
        assert nothing_arrives(receiver)
        [letter] = take(dead, 1)
    assert str(letter) == "hopeless"
    assert letter.dead_letter_reason == "MaxDeliveryCountExceeded"
    assert letter.delivery_count == 3


def test_a_receiver_waiting_on_the_dead_letter_queue_gets_every_message_dead_lettered_after_it_attached(
    client: ServiceBusClient,
) -> None:
    # With prefetch the SDK grants the dead-letter receiver its credit once, at attach, and receive calls do not
    # renew it: only the broker handing over newly dead-lettered messages on its own can make them arrive.
    with opened(
        client.get_queue_sender("dlq-live"),
        client.get_queue_receiver("dlq-live"),
        client.get_queue_receiver("dlq-live", sub_queue=ServiceBusSubQueue.DEAD_LETTER, prefetch_count=10),
    ) as (sender, receiver, dead):
        assert nothing_arrives(dead)
        sender.send_messages([ServiceBusMessage(text) for text in ("explicit", "abandoned", "forgotten")])
        sender.send_messages(ServiceBusMessage("expired", time_to_live=datetime.timedelta(seconds=1)))
        explicit, abandoned, _forgotten = take(receiver, 3, complete=False)
        receiver.dead_letter_message(explicit, reason="live")
        receiver.abandon_message(abandoned)  # MaxDeliveryCount is 1
        # "forgotten" is never settled: its 2 s lock runs out; "expired" is never received: its 1 s TTL runs out.
        # One at a time, each completed at once: a dead letter left locked for 2 s would come round again.
        letters = [letter for _ in range(4) for letter in take(dead, 1, wait_s=3 * WAIT_S)]
    reasons = {str(m): m.dead_letter_reason for m in letters}
    assert reasons == {
        "explicit": "live",
        "abandoned": "MaxDeliveryCountExceeded",
        "forgotten": "MaxDeliveryCountExceeded",
        "expired": "TTLExpiredException",
    }


def test_settlement_over_the_management_link_is_applied(client: ServiceBusClient) -> None:
    with opened(client.get_queue_sender("mgmt-settle"), client.get_queue_receiver("mgmt-settle")) as (sender, receiver):
        sender.send_messages([ServiceBusMessage("complete me"), ServiceBusMessage("dead-letter me")])
        done, dead = take(receiver, 2, complete=False)
        # The SDK settles this way when the receive link cannot confirm a settlement.
        receiver._settle_message_via_mgmt_link("completed", [done.lock_token])
        receiver._settle_message_via_mgmt_link(
            "suspended", [dead.lock_token], {"deadletter-reason": "why", "deadletter-description": "because"}
        )
        assert receiver.peek_messages(max_message_count=5, sequence_number=1) == []
    with client.get_queue_receiver("mgmt-settle", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as letters:
        [letter] = letters.peek_messages(max_message_count=5)
    assert (letter.dead_letter_reason, letter.dead_letter_error_description) == ("why", "because")


def test_receive_and_delete_removes_messages_on_delivery(client: ServiceBusClient) -> None:
    with opened(
        client.get_queue_sender("receive-delete"),
        client.get_queue_receiver("receive-delete", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE),
    ) as (sender, receiver):
        sender.send_messages([ServiceBusMessage(f"gone {i}") for i in range(5)])
        got = take(receiver, 5)
        assert receiver.peek_messages(max_message_count=10, sequence_number=1) == []
    assert texts(got) == [f"gone {i}" for i in range(5)]
    assert all(m.lock_token is None for m in got)


def test_prefetch_delivers_ahead_and_every_prefetched_message_can_be_completed(client: ServiceBusClient) -> None:
    with opened(
        client.get_queue_sender("prefetch"),
        client.get_queue_receiver("prefetch", prefetch_count=20),
    ) as (sender, receiver):
        sender.send_messages([ServiceBusMessage(f"p {i}") for i in range(30)])
        got = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < 30 and time.monotonic() < deadline:
            got += take(receiver, 5, wait_s=1)
        assert receiver.peek_messages(max_message_count=50, sequence_number=1) == []
    assert sorted(texts(got), key=lambda t: int(t.split()[1])) == [f"p {i}" for i in range(30)]


def test_messages_prefetched_but_never_read_are_released_when_the_receiver_closes(client: ServiceBusClient) -> None:
    with client.get_queue_sender("release") as sender:
        sender.send_messages([ServiceBusMessage(f"r {i}") for i in range(10)])
        with client.get_queue_receiver("release", prefetch_count=10) as receiver:
            take(receiver, 1)
        # The lock duration is 30 s: without the release the other nine would stay locked that long.
        with client.get_queue_receiver("release") as receiver:
            rest = take(receiver, 9, wait_s=2)
    assert len(rest) == 9
    assert all(m.delivery_count == 0 for m in rest)


def test_peek_shows_messages_in_order_without_locking_or_counting(client: ServiceBusClient) -> None:
    with opened(client.get_queue_sender("peek"), client.get_queue_receiver("peek")) as (sender, receiver):
        sender.send_messages([ServiceBusMessage(f"look {i}") for i in range(6)])
        first = receiver.peek_messages(max_message_count=4)
        rest = receiver.peek_messages(max_message_count=4)  # continues after the last peeked sequence number
        again = receiver.peek_messages(max_message_count=2, sequence_number=first[2].sequence_number)
        got = take(receiver, 6)
    assert texts(first) == [f"look {i}" for i in range(4)]
    assert texts(rest) == ["look 4", "look 5"]
    assert texts(again) == ["look 2", "look 3"]
    assert all(m.lock_token is None and m.state == ServiceBusMessageState.ACTIVE for m in first)
    assert [m.delivery_count for m in got] == [0] * 6


def test_queue_names_are_case_insensitive(client: ServiceBusClient) -> None:
    with opened(client.get_queue_sender("CASE"), client.get_queue_receiver("Case")) as (sender, receiver):
        sender.send_messages(ServiceBusMessage("shout"))
        assert texts(take(receiver, 1)) == ["shout"]
