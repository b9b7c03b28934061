"""The SDK's own exceptions for what the broker refuses: size, unknown entities, bad credentials."""

from __future__ import annotations

import pytest
from azure.core.credentials import AzureNamedKeyCredential
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.exceptions import (
    MessageSizeExceededError,
    MessagingEntityNotFoundError,
    ServiceBusAuthenticationError,
    ServiceBusError,
)

from devstack.broker import KEY_NAME
from tests.servicebus.conftest import RunningBroker
from tests.servicebus.sdk import opened, take

pytestmark = pytest.mark.timeout(60)


def test_a_200_kb_message_crosses_many_frames_and_arrives_intact(client: ServiceBusClient) -> None:
    body = bytes(range(256)) * 800  # 204,800 bytes
    with opened(client.get_queue_sender("size"), client.get_queue_receiver("size")) as (sender, receiver):
        sender.send_messages(ServiceBusMessage(body))
        [message] = take(receiver, 1)
    assert b"".join(message.body) == body


def test_a_message_over_256_kb_raises_the_sdk_size_error_and_the_link_keeps_working(
    no_retry_client: ServiceBusClient,
) -> None:
    with opened(no_retry_client.get_queue_sender("size"), no_retry_client.get_queue_receiver("size")) as (
        sender,
        receiver,
    ):
        with pytest.raises(MessageSizeExceededError):
            sender.send_messages(ServiceBusMessage(b"x" * (256 * 1024 + 1)))
        sender.send_messages(ServiceBusMessage("small"))
        assert [str(m) for m in take(receiver, 2, wait_s=2)] == ["small"]


def test_an_unknown_queue_raises_entity_not_found_for_senders_and_receivers(no_retry_client: ServiceBusClient) -> None:
    with pytest.raises(MessagingEntityNotFoundError), no_retry_client.get_queue_sender("no-such-queue") as sender:
        sender.send_messages(ServiceBusMessage("lost"))
    with pytest.raises(MessagingEntityNotFoundError), no_retry_client.get_queue_receiver("no-such-queue") as receiver:
        receiver.receive_messages(max_wait_time=1)


def test_sending_to_a_dead_letter_queue_is_refused(no_retry_client: ServiceBusClient) -> None:
    with pytest.raises(ServiceBusError), no_retry_client.get_queue_sender("dlq-send/$DeadLetterQueue") as sender:
        sender.send_messages(ServiceBusMessage("no"))
    with no_retry_client.get_queue_receiver("dlq-send", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead:
        assert dead.peek_messages(max_message_count=5) == []


def test_a_token_signed_with_another_key_is_refused(conformance_broker: RunningBroker) -> None:
    endpoint = f"localhost:{conformance_broker.port}"
    wrong = AzureNamedKeyCredential(KEY_NAME, "not-the-development-key")
    with (
        ServiceBusClient(endpoint, wrong, use_tls=False, retry_total=0) as client,
        pytest.raises(ServiceBusAuthenticationError),
        client.get_queue_sender("send-one") as sender,
    ):
        sender.send_messages(ServiceBusMessage("intruder"))
    assert "InvalidSignature" in conformance_broker.log()


def test_a_connection_string_with_another_key_is_refused(conformance_broker: RunningBroker) -> None:
    connection_string = conformance_broker.connection_string.replace("SAS_KEY_VALUE", "c2VjcmV0")
    with (
        ServiceBusClient.from_connection_string(connection_string, retry_total=0) as client,
        pytest.raises(ServiceBusAuthenticationError),
        client.get_queue_receiver("send-one") as receiver,
    ):
        receiver.receive_messages(max_wait_time=1)
