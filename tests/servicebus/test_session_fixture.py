"""The shared `servicebus_service` fixture that other tests use: auto-created queues by the connection string alone."""

from __future__ import annotations

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient

from tests.conftest import Names
from tests.fixtures_servicebus import ServiceBus

pytestmark = pytest.mark.timeout(60)


async def test_a_fresh_queue_name_works_by_the_emulator_connection_string_alone(
    servicebus_service: ServiceBus, names: Names
) -> None:
    queue = names.queue("trigger")
    assert servicebus_service.connection_string.startswith(f"Endpoint=sb://localhost:{servicebus_service.port};")
    assert servicebus_service.connection_string.endswith("UseDevelopmentEmulator=true;")
    async with ServiceBusClient.from_connection_string(servicebus_service.connection_string) as client:
        async with client.get_queue_sender(queue) as sender:
            await sender.send_messages(ServiceBusMessage('{"account": "a", "queue": "q", "reason": "submitted"}'))
        async with client.get_queue_receiver(queue, max_wait_time=5) as receiver:
            [message] = await receiver.receive_messages(max_wait_time=5)
            await receiver.complete_message(message)
    assert str(message).startswith('{"account"')
    assert f"auto-created queue {queue}" in servicebus_service.process.log_path.read_text()
