"""Reaching the stand-in by the emulator connection string, whatever `localhost` resolves to first."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient

from devstack.broker import connection_string
from tests.servicebus.conftest import RunningBroker
from tests.servicebus.sdk import opened, take, texts

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def localhost_resolves_to_ipv6_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many machines list ::1 before 127.0.0.1 for localhost; the stand-in listens on 127.0.0.1 only."""
    real = socket.getaddrinfo

    def ipv6_first(host: Any, port: Any, family: int = 0, *args: Any, **kwargs: Any) -> list[Any]:
        found = real(host, port, family, *args, **kwargs)
        if host == "localhost" and family in (0, socket.AF_UNSPEC):
            found = [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", int(port), 0, 0)), *found]
        return found

    monkeypatch.setattr(socket, "getaddrinfo", ipv6_first)
    assert socket.getaddrinfo("localhost", 1, 0, socket.SOCK_STREAM)[0][0] == socket.AF_INET6


@pytest.mark.usefixtures("localhost_resolves_to_ipv6_first")
async def test_the_sdk_falls_back_to_127_0_0_1_when_localhost_is_ipv6_first(conformance_broker: RunningBroker) -> None:
    with (
        ServiceBusClient.from_connection_string(conformance_broker.connection_string) as client,
        client.get_queue_sender("connection") as sender,
    ):
        sender.send_messages(ServiceBusMessage("via ::1, then 127.0.0.1"))
    async with (
        AsyncServiceBusClient.from_connection_string(conformance_broker.connection_string) as client,
        client.get_queue_receiver("connection") as receiver,
    ):
        [message] = await receiver.receive_messages(max_wait_time=5)
        await receiver.complete_message(message)
    assert str(message) == "via ::1, then 127.0.0.1"


def test_an_explicit_127_0_0_1_endpoint_works_too(conformance_broker: RunningBroker) -> None:
    explicit = connection_string(conformance_broker.port, host="127.0.0.1")
    with (
        ServiceBusClient.from_connection_string(explicit) as client,
        opened(client.get_queue_sender("connection"), client.get_queue_receiver("connection")) as (sender, receiver),
    ):
        sender.send_messages(ServiceBusMessage("by address"))
        assert texts(take(receiver, 1)) == ["by address"]
