"""Delivery annotations both ways, and a session receiver refused on a queue without sessions."""

from __future__ import annotations

import uuid

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.exceptions import ServiceBusError

from tests.servicebus.conftest import RunningBroker
from tests.servicebus.sdk import take

pytestmark = pytest.mark.timeout(60)

LOCK_TOKEN = b"x-opt-lock-token"


def annotated(body: str, number: int) -> ServiceBusMessage:
    message = ServiceBusMessage(body)
    message.raw_amqp_message.delivery_annotations = {b"delivery_annotations": number}
    return message


def test_a_locked_delivery_carries_its_lock_token_as_a_delivery_annotation_and_a_peek_does_not(
    client: ServiceBusClient,
) -> None:
    with client.get_queue_sender("lock-token-annotation") as sender:
        sender.send_messages(ServiceBusMessage("locked"))
    with client.get_queue_receiver("lock-token-annotation") as receiver:
        [message] = take(receiver, 1, complete=False)
        annotations = message.raw_amqp_message.delivery_annotations or {}
        assert annotations.get(LOCK_TOKEN) == message.lock_token == uuid.UUID(bytes_le=message.message.delivery_tag)
        [peeked] = receiver.peek_messages(1, sequence_number=1)
        assert LOCK_TOKEN not in (peeked.raw_amqp_message.delivery_annotations or {})
        receiver.complete_message(message)


def test_delivery_annotations_set_by_the_sender_arrive(client: ServiceBusClient) -> None:
    with client.get_queue_sender("delivery-annotations") as sender:
        sender.send_messages(annotated("one", 3))
    with client.get_queue_receiver("delivery-annotations") as receiver:
        [message] = take(receiver, 1)
    assert str(message) == "one"
    assert (message.raw_amqp_message.delivery_annotations or {})[b"delivery_annotations"] == 3


def test_a_batch_whose_first_message_has_delivery_annotations_arrives_as_its_messages(
    client: ServiceBusClient,
) -> None:
    with client.get_queue_sender("delivery-annotations-batch") as sender:
        sender.send_messages([annotated("first", 1), ServiceBusMessage("second"), annotated("third", 3)])
    with client.get_queue_receiver("delivery-annotations-batch") as receiver:
        messages = take(receiver, 3)
    assert [str(m) for m in messages] == ["first", "second", "third"]
    assert [(m.raw_amqp_message.delivery_annotations or {}).get(b"delivery_annotations") for m in messages] == [
        1,
        None,
        3,
    ]


def test_a_session_receiver_on_a_queue_without_sessions_is_refused(no_retry_client: ServiceBusClient) -> None:
    with pytest.raises(ServiceBusError), no_retry_client.get_queue_receiver("no-sessions", session_id="s") as receiver:
        receiver.receive_messages(max_wait_time=1)


async def test_an_aio_session_receiver_on_a_queue_without_sessions_is_refused(
    conformance_broker: RunningBroker,
) -> None:
    async with AsyncServiceBusClient.from_connection_string(conformance_broker.connection_string, retry_total=0) as sb:
        receiver = sb.get_queue_receiver("no-sessions", session_id="s")
        try:
            with pytest.raises(ServiceBusError):
                await receiver._open_with_retry()  # how the SDK's own tests open a receiver without receiving
        finally:
            await receiver.close()
