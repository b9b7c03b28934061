"""The async client (`azure.servicebus.aio`), which the app's drain path and the local host use."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode, ServiceBusSubQueue
from azure.servicebus.aio import AutoLockRenewer, ServiceBusClient, ServiceBusReceiver, ServiceBusSender
from azure.servicebus.exceptions import (
    MessageLockLostError,
    MessageSizeExceededError,
    MessagingEntityNotFoundError,
    ServiceBusAuthenticationError,
)

from tests.servicebus.conftest import RunningBroker
from tests.servicebus.sdk import utcnow

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def aio_client(conformance_broker: RunningBroker) -> AsyncIterator[ServiceBusClient]:
    async with ServiceBusClient.from_connection_string(conformance_broker.connection_string) as client:
        yield client


@pytest.fixture
async def aio_no_retry_client(conformance_broker: RunningBroker) -> AsyncIterator[ServiceBusClient]:
    """For errors the SDK would otherwise retry for seconds before raising."""
    async with ServiceBusClient.from_connection_string(conformance_broker.connection_string, retry_total=0) as client:
        yield client


async def open_pair(
    client: ServiceBusClient, queue: str, **receiver_options: object
) -> tuple[ServiceBusSender, ServiceBusReceiver]:
    sender = client.get_queue_sender(queue)
    receiver = client.get_queue_receiver(queue, **receiver_options)
    await asyncio.gather(sender.__aenter__(), receiver.__aenter__())
    return sender, receiver


async def close_all(*handlers: ServiceBusSender | ServiceBusReceiver) -> None:
    await asyncio.gather(*(handler.close() for handler in handlers))


async def take(receiver: ServiceBusReceiver, count: int, wait_s: float = 5.0) -> list:
    got: list = []
    deadline = asyncio.get_running_loop().time() + wait_s
    while len(got) < count and asyncio.get_running_loop().time() < deadline:
        got += await receiver.receive_messages(max_message_count=count - len(got), max_wait_time=1)
    return got


async def test_async_send_receive_and_every_settlement(aio_client: ServiceBusClient) -> None:
    sender, receiver = await open_pair(aio_client, "aio")
    try:
        await sender.send_messages([ServiceBusMessage(name) for name in ("complete", "abandon", "defer", "dead")])
        by_body = {str(m): m for m in await take(receiver, 4)}
        await receiver.complete_message(by_body["complete"])
        await receiver.abandon_message(by_body["abandon"])
        await receiver.defer_message(by_body["defer"])
        await receiver.dead_letter_message(by_body["dead"], reason="r", error_description="d")
        [back] = await take(receiver, 1)
        assert (str(back), back.delivery_count) == ("abandon", 1)
        await receiver.complete_message(back)
        [deferred] = await receiver.receive_deferred_messages([by_body["defer"].sequence_number])
        await receiver.renew_message_lock(deferred)
        await receiver.complete_message(deferred)
        assert await receiver.peek_messages(max_message_count=10, sequence_number=1) == []
    finally:
        await close_all(sender, receiver)
    async with aio_client.get_queue_receiver("aio", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead:
        [letter] = await take(dead, 1)
        await dead.complete_message(letter)
    assert (str(letter), letter.dead_letter_reason, letter.dead_letter_error_description) == ("dead", "r", "d")


async def test_async_iteration_with_auto_lock_renewal_and_scheduling(aio_client: ServiceBusClient) -> None:
    renewer = AutoLockRenewer(max_lock_renewal_duration=30)
    sender, receiver = await open_pair(aio_client, "aio", auto_lock_renewer=renewer, max_wait_time=5)
    try:
        due = utcnow() + datetime.timedelta(seconds=1)
        [number] = await sender.schedule_messages(ServiceBusMessage("scheduled"), due)
        [cancelled] = await sender.schedule_messages(ServiceBusMessage("cancelled"), due)
        await sender.cancel_scheduled_messages(cancelled)
        async for message in receiver:
            assert (str(message), message.sequence_number) == ("scheduled", number)
            assert utcnow() >= due
            await asyncio.sleep(4)  # the lock is 3 s; the renewer must keep it
            await receiver.complete_message(message)
            assert message.auto_renew_error is None
            break
        assert await receiver.receive_messages(max_wait_time=0.5) == []
    finally:
        await renewer.close()
        await close_all(sender, receiver)


async def test_async_receive_and_delete_with_prefetch(aio_client: ServiceBusClient) -> None:
    sender, receiver = await open_pair(
        aio_client, "aio-receive-delete", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE, prefetch_count=50
    )
    try:
        await sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(40)])
        got = await take(receiver, 40)
        assert sorted(str(m) for m in got) == sorted(f"m{i}" for i in range(40))
        assert await receiver.peek_messages(max_message_count=50, sequence_number=1) == []
    finally:
        await close_all(sender, receiver)


async def test_async_dead_letter_receiver_iterating_before_the_dead_lettering_gets_the_message(
    aio_client: ServiceBusClient,
) -> None:
    sender, receiver = await open_pair(aio_client, "aio-dlq-live")
    # The iterating receiver's credit is granted at attach; iterating does not renew it.
    dead = aio_client.get_queue_receiver("aio-dlq-live", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=15)
    await dead.__aenter__()

    async def first_letter() -> list:
        async for letter in dead:
            await dead.complete_message(letter)
            return [letter]
        return []

    try:
        waiting = asyncio.create_task(first_letter())
        await sender.send_messages(ServiceBusMessage("poison"))
        [message] = await take(receiver, 1)
        await receiver.dead_letter_message(message, reason="late")
        [letter] = await waiting
    finally:
        await close_all(sender, receiver, dead)
    assert (str(letter), letter.dead_letter_reason) == ("poison", "late")


async def test_async_batches_max_delivery_count_ttl_dead_lettering_and_duplicate_detection(
    aio_client: ServiceBusClient,
) -> None:
    sender, receiver = await open_pair(aio_client, "aio-rules")
    dead = aio_client.get_queue_receiver("aio-rules", sub_queue=ServiceBusSubQueue.DEAD_LETTER)
    await dead.__aenter__()
    try:
        batch = await sender.create_message_batch()
        batch.add_message(ServiceBusMessage("once", message_id="same"))
        batch.add_message(ServiceBusMessage("hopeless"))
        batch.add_message(ServiceBusMessage("expiring", time_to_live=datetime.timedelta(seconds=1)))
        await sender.send_messages(batch)
        await sender.send_messages(ServiceBusMessage("twice", message_id="same"))  # inside the 1 min window
        once, hopeless = await take(receiver, 2)
        await receiver.complete_message(once)
        await receiver.abandon_message(hopeless)  # MaxDeliveryCount is 1
        letters = await take(dead, 2)  # "expiring" is never received: its TTL runs out after 1 s
        for letter in letters:
            await dead.complete_message(letter)
        assert await receiver.receive_messages(max_wait_time=0.5) == []
    finally:
        await close_all(sender, receiver, dead)
    assert (str(once), str(hopeless)) == ("once", "hopeless")
    assert {str(m): m.dead_letter_reason for m in letters} == {
        "hopeless": "MaxDeliveryCountExceeded",
        "expiring": "TTLExpiredException",
    }


async def test_async_client_raises_the_sdk_errors_for_size_lost_locks_unknown_queues_and_bad_keys(
    aio_no_retry_client: ServiceBusClient, conformance_broker: RunningBroker
) -> None:
    sender, receiver = await open_pair(aio_no_retry_client, "aio-errors")
    try:
        with pytest.raises(MessageSizeExceededError):
            await sender.send_messages(ServiceBusMessage(b"x" * (256 * 1024 + 1)))
        await sender.send_messages(ServiceBusMessage("slow"))
        [message] = await take(receiver, 1)
        await asyncio.sleep(1.2)  # the lock duration is 1 s
        message._expiry = utcnow() + datetime.timedelta(minutes=1)  # so the SDK asks the broker, which must refuse
        with pytest.raises(MessageLockLostError):
            await receiver.complete_message(message)
    finally:
        await close_all(sender, receiver)
    with pytest.raises(MessagingEntityNotFoundError):
        async with aio_no_retry_client.get_queue_sender("no-such-queue") as lost:
            await lost.send_messages(ServiceBusMessage("lost"))
    wrong_key = conformance_broker.connection_string.replace("SAS_KEY_VALUE", "c2VjcmV0")
    with pytest.raises(ServiceBusAuthenticationError):
        async with (
            ServiceBusClient.from_connection_string(wrong_key, retry_total=0) as intruder,
            intruder.get_queue_receiver("aio-errors") as refused,
        ):
            await refused.receive_messages(max_wait_time=1)
