"""What time does to a message, with the unmodified SDK (sync client) against the stand-in: lock expiry and renewal
(by hand and by `AutoLockRenewer`), scheduled messages and their cancelling, TTL and dead-lettering on expiry, and
duplicate detection inside its window.

Each test uses its own queue, and opens and closes its SDK senders and receivers side by side (`opened`).
"""

from __future__ import annotations

import datetime
import time

import pytest
from azure.servicebus import (
    AutoLockRenewer,
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusMessageState,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import MessageLockLostError, MessageNotFoundError

from tests.servicebus.sdk import nothing_arrives, opened, take, texts, utcnow

pytestmark = pytest.mark.timeout(60)


def test_an_expired_lock_redelivers_the_message_and_late_settlement_raises_lock_lost(client: ServiceBusClient) -> None:
    with opened(
        client.get_queue_sender("lock-expiry"),
        client.get_queue_receiver("lock-expiry"),
        client.get_queue_receiver("lock-expiry"),
    ) as (sender, first, second):
        sender.send_messages([ServiceBusMessage("slow"), ServiceBusMessage("stale")])
        slow, stale = take(first, 2, complete=False)
        assert nothing_arrives(second)
        time.sleep(1.1)  # the lock duration is 1 s
        again = take(second, 2, complete=False)
        assert sorted(m.sequence_number for m in again) == [slow.sequence_number, stale.sequence_number]
        assert [m.delivery_count for m in again] == [1, 1]
        with pytest.raises(MessageLockLostError):  # the SDK's own expiry check
            first.complete_message(slow)
        # Make the SDK believe the lock is fine, so it asks the broker, which must refuse.
        stale._expiry = utcnow() + datetime.timedelta(minutes=1)
        with pytest.raises(MessageLockLostError):
            first.complete_message(stale)
        for message in again:
            second.complete_message(message)


def test_renewing_a_lock_keeps_the_message_from_being_redelivered(client: ServiceBusClient) -> None:
    with opened(
        client.get_queue_sender("renew-lock"),
        client.get_queue_receiver("renew-lock"),
        client.get_queue_receiver("renew-lock"),
    ) as (sender, receiver, other):
        sender.send_messages(ServiceBusMessage("long job"))
        [message] = take(receiver, 1, complete=False)
        first_expiry = message.locked_until_utc
        for _ in range(3):  # 3 s in all; the lock duration is 2 s
            time.sleep(1)
            new_expiry = receiver.renew_message_lock(message)
        assert new_expiry > first_expiry + datetime.timedelta(seconds=2)
        assert nothing_arrives(other)
        receiver.complete_message(message)


def test_auto_lock_renewer_holds_the_lock_beyond_the_lock_duration(client: ServiceBusClient) -> None:
    renewer = AutoLockRenewer(max_lock_renewal_duration=30)
    try:
        with opened(
            client.get_queue_sender("auto-renew"),
            client.get_queue_receiver("auto-renew", auto_lock_renewer=renewer),
            client.get_queue_receiver("auto-renew"),
        ) as (sender, receiver, other):
            sender.send_messages(ServiceBusMessage("very long job"))
            [message] = take(receiver, 1, complete=False)
            time.sleep(4.5)  # more than two lock durations of 2 s
            assert nothing_arrives(other)
            receiver.complete_message(message)
            assert message.auto_renew_error is None
    finally:
        renewer.close()


def test_scheduled_messages_arrive_at_their_time_and_show_as_scheduled_until_then(client: ServiceBusClient) -> None:
    with opened(client.get_queue_sender("schedule"), client.get_queue_receiver("schedule")) as (sender, receiver):
        due = utcnow() + datetime.timedelta(seconds=1.5)
        [number] = sender.schedule_messages(ServiceBusMessage("wake up"), due)
        [peeked] = receiver.peek_messages(max_message_count=5)
        assert peeked.sequence_number == number
        assert peeked.state == ServiceBusMessageState.SCHEDULED
        assert nothing_arrives(receiver)
        [message] = take(receiver, 1)
        arrived = utcnow()
    assert str(message) == "wake up"
    assert message.sequence_number == number
    assert message.state == ServiceBusMessageState.ACTIVE
    assert due <= arrived < due + datetime.timedelta(seconds=1)


def test_a_cancelled_scheduled_message_never_arrives(client: ServiceBusClient) -> None:
    with opened(client.get_queue_sender("schedule-cancel"), client.get_queue_receiver("schedule-cancel")) as (
        sender,
        receiver,
    ):
        keep, drop = sender.schedule_messages(
            [ServiceBusMessage("keep"), ServiceBusMessage("drop")], utcnow() + datetime.timedelta(seconds=1)
        )
        sender.cancel_scheduled_messages(drop)
        time.sleep(1.2)
        got = take(receiver, 2, wait_s=1)
    assert texts(got) == ["keep"]
    assert got[0].sequence_number == keep


def test_cancelling_an_unknown_scheduled_message_raises_message_not_found(no_retry_client: ServiceBusClient) -> None:
    with no_retry_client.get_queue_sender("schedule-cancel") as sender, pytest.raises(MessageNotFoundError):
        sender.cancel_scheduled_messages(987654)


def test_a_message_sent_with_a_scheduled_enqueue_time_waits_for_it(client: ServiceBusClient) -> None:
    with opened(client.get_queue_sender("schedule-send"), client.get_queue_receiver("schedule-send")) as (
        sender,
        receiver,
    ):
        message = ServiceBusMessage("not yet")
        message.scheduled_enqueue_time_utc = utcnow() + datetime.timedelta(seconds=1)
        sender.send_messages(message)
        assert nothing_arrives(receiver)
        [got] = take(receiver, 1)
    assert str(got) == "not yet"
    assert got.scheduled_enqueue_time_utc is not None


def test_message_ttl_and_the_queue_default_ttl_expire_messages(client: ServiceBusClient) -> None:
    with opened(
        client.get_queue_sender("ttl-message"),
        client.get_queue_sender("ttl-queue"),
        client.get_queue_receiver("ttl-message"),
        client.get_queue_receiver("ttl-queue"),
    ) as (own_ttl, queue_ttl, own_ttl_receiver, queue_ttl_receiver):
        own_ttl.send_messages(
            [ServiceBusMessage("short-lived", time_to_live=datetime.timedelta(seconds=1)), ServiceBusMessage("kept")]
        )
        # ttl-queue's default TTL is 1 s, which caps the message's own hour.
        queue_ttl.send_messages(ServiceBusMessage("capped", time_to_live=datetime.timedelta(hours=1)))
        time.sleep(1.2)
        assert texts(take(own_ttl_receiver, 2, wait_s=1)) == ["kept"]
        assert nothing_arrives(queue_ttl_receiver)
    with client.get_queue_receiver("ttl-message", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead:
        assert dead.peek_messages(max_message_count=5) == []


def test_expired_messages_are_dead_lettered_when_the_queue_says_so(client: ServiceBusClient) -> None:
    with opened(
        client.get_queue_sender("ttl-dead-letter"),
        client.get_queue_receiver("ttl-dead-letter", sub_queue=ServiceBusSubQueue.DEAD_LETTER),
    ) as (sender, dead):
        sender.send_messages(ServiceBusMessage("expired"))
        time.sleep(1.2)  # nobody receives: the broker expires it on its own
        [letter] = take(dead, 1)
    assert str(letter) == "expired"
    assert letter.dead_letter_reason == "TTLExpiredException"


def test_duplicate_message_ids_within_the_window_are_dropped(client: ServiceBusClient) -> None:
    with opened(client.get_queue_sender("dedupe"), client.get_queue_receiver("dedupe")) as (sender, receiver):
        sender.send_messages(
            [ServiceBusMessage("first", message_id="same"), ServiceBusMessage("other", message_id="x")]
        )
        sender.send_messages(ServiceBusMessage("second", message_id="same"))
        time.sleep(2.1)  # the window is 2 s
        sender.send_messages(ServiceBusMessage("third", message_id="same"))
        assert texts(take(receiver, 4, wait_s=1)) == ["first", "other", "third"]


def test_without_duplicate_detection_equal_message_ids_are_all_kept(client: ServiceBusClient) -> None:
    with opened(client.get_queue_sender("no-dedupe"), client.get_queue_receiver("no-dedupe")) as (sender, receiver):
        sender.send_messages(ServiceBusMessage("a", message_id="same"))
        sender.send_messages(ServiceBusMessage("b", message_id="same"))
        assert texts(take(receiver, 2)) == ["a", "b"]
