"""Many `$management` requests at once on one link, as Service Bus accepts them.

The SDK (7.15) numbers a transfer before it writes it and counts on after, without a lock: threads (or
tasks) sending at the same moment on one session send the same delivery-id twice or skip one. Service Bus
takes that; proton alone closes the connection (`amqp:session:invalid-field: sequencing error`).
"""

from __future__ import annotations

import asyncio
import datetime
from concurrent.futures import ThreadPoolExecutor

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient

from tests.servicebus.conftest import RunningBroker
from tests.servicebus.sdk import take, utcnow

pytestmark = pytest.mark.timeout(120)

WORKERS = 10
ROUNDS = 5


def test_ten_threads_peeking_on_one_receiver_all_get_their_answer(client: ServiceBusClient) -> None:
    with client.get_queue_sender("concurrent-peek") as sender:
        sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(3)])
    with client.get_queue_receiver("concurrent-peek") as receiver, ThreadPoolExecutor(WORKERS) as pool:
        for _ in range(ROUNDS):
            futures = [pool.submit(receiver.peek_messages, 3, sequence_number=1) for _ in range(WORKERS)]
            peeked = [[str(m) for m in future.result(timeout=30)] for future in futures]
            assert peeked == [["m0", "m1", "m2"]] * WORKERS
        assert sorted(str(m) for m in take(receiver, 3)) == ["m0", "m1", "m2"]


def test_ten_threads_renewing_locks_on_one_receiver_all_renew(client: ServiceBusClient) -> None:
    with client.get_queue_sender("concurrent-renew") as sender:
        sender.send_messages([ServiceBusMessage(f"r{i}") for i in range(WORKERS)])
    with client.get_queue_receiver("concurrent-renew") as receiver, ThreadPoolExecutor(WORKERS) as pool:
        messages = take(receiver, WORKERS, complete=False)
        assert len(messages) == WORKERS
        for _ in range(ROUNDS):
            renewed = list(pool.map(receiver.renew_message_lock, messages, timeout=30))
            assert all(until > utcnow() + datetime.timedelta(seconds=20) for until in renewed)
        for message in messages:
            receiver.complete_message(message)


async def test_ten_tasks_peeking_on_one_aio_receiver_all_get_their_answer(conformance_broker: RunningBroker) -> None:
    async with AsyncServiceBusClient.from_connection_string(conformance_broker.connection_string) as client:
        async with client.get_queue_sender("aio-concurrent-peek") as sender:
            await sender.send_messages([ServiceBusMessage(f"a{i}") for i in range(3)])
        async with client.get_queue_receiver("aio-concurrent-peek") as receiver:
            for _ in range(ROUNDS):
                results = await asyncio.gather(*(receiver.peek_messages(3, sequence_number=1) for _ in range(WORKERS)))
                assert [[str(m) for m in result] for result in results] == [["a0", "a1", "a2"]] * WORKERS


async def test_scheduling_and_cancelling_at_once_on_one_aio_sender_all_succeed(
    conformance_broker: RunningBroker,
) -> None:
    later = utcnow() + datetime.timedelta(hours=1)
    async with AsyncServiceBusClient.from_connection_string(conformance_broker.connection_string) as client:
        async with client.get_queue_sender("aio-concurrent-schedule") as sender:
            for _ in range(ROUNDS):
                batches = await asyncio.gather(
                    *(sender.schedule_messages(ServiceBusMessage(f"s{i}"), later) for i in range(WORKERS))
                )
                numbers = [number for batch in batches for number in batch]
                assert len(set(numbers)) == WORKERS
                await asyncio.gather(*(sender.cancel_scheduled_messages(number) for number in numbers))
        async with client.get_queue_receiver("aio-concurrent-schedule") as receiver:
            assert await receiver.peek_messages(WORKERS * ROUNDS, sequence_number=1) == []
