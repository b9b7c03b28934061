"""Service Bus triggers through a real host process against the real broker, checked with the real SDK."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSubQueue

from devstack.broker import broker, connection_string, write_config
from devstack.procs import free_port
from emulators.functions.errors import ConfigError
from emulators.functions.servicebus import service_bus_client
from tests.conftest import Names
from tests.fixtures_servicebus import ServiceBus
from tests.host.conftest import RunningHost, StartHost, wait_until

DEFAULT_MAX_DELIVERY_COUNT = 10
# The host renews a lock with a quarter of it left (at least 1 s: LockKeeper), so 5 s locks are renewed
# about every 3.75 s: short enough to test renewal, long enough not to race the clock.
SHORT_LOCK_QUEUE = "short-lock"


def send(connection: str, queue: str, *commands: dict[str, Any]) -> None:
    with ServiceBusClient.from_connection_string(connection) as client, client.get_queue_sender(queue) as sender:
        sender.send_messages(
            [ServiceBusMessage(json.dumps(c), application_properties={"origin": "test"}) for c in commands]
        )


def dead_letters(connection: str, queue: str, wait_s: float) -> list[ServiceBusReceivedMessage]:
    with (
        ServiceBusClient.from_connection_string(connection) as client,
        client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as receiver,
    ):
        messages = receiver.receive_messages(max_message_count=10, max_wait_time=wait_s)
        for message in messages:
            receiver.complete_message(message)
        return list(messages)


def active_messages(connection: str, queue: str) -> int:
    with ServiceBusClient.from_connection_string(connection) as client, client.get_queue_receiver(queue) as receiver:
        return len(receiver.peek_messages(max_message_count=50))


def calls(host: RunningHost, event: str = "start", id_: str | None = None) -> list[dict[str, Any]]:
    path = host.markers / "calls.jsonl"
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line]
    return [r for r in records if r["event"] == event and (id_ is None or r["id"] == id_)]


def sb_env(connection: str, queue: str, **extra: str) -> dict[str, str]:
    return {"SB_CONNECTION": connection, "SB_QUEUE": queue, **extra}


def test_a_message_is_completed_when_the_function_succeeds(
    start_host: StartHost, servicebus_service: ServiceBus, names: Names
) -> None:
    queue, connection = names.queue("sb"), servicebus_service.connection_string
    host = start_host("servicebus_app", env=sb_env(connection, queue))
    send(connection, queue, {"id": "ok-1", "action": "ok"})
    wait_until(lambda: len(calls(host, "end", "ok-1")) == 1, 15, "the invocation to finish")
    host.wait_for_log("Executed 'Functions.handle' (Succeeded")
    time.sleep(1.0)
    started = calls(host, "start", "ok-1")
    assert len(started) == 1
    assert started[0]["properties"] == {"origin": "test"}
    assert active_messages(connection, queue) == 0
    assert dead_letters(connection, queue, wait_s=1) == []
    assert f"Executing 'Functions.handle' (Reason='New ServiceBus message detected on '{queue}'.'" in host.log()


def test_a_failing_message_is_abandoned_redelivered_and_dead_lettered_after_max_delivery_count(
    start_host: StartHost, servicebus_service: ServiceBus, names: Names
) -> None:
    queue, connection = names.queue("sb"), servicebus_service.connection_string
    host = start_host("servicebus_app", env=sb_env(connection, queue))
    send(connection, queue, {"id": "bad", "action": "fail"})
    wait_until(lambda: len(calls(host, "start", "bad")) >= DEFAULT_MAX_DELIVERY_COUNT, 20, "every delivery attempt")
    # Read the dead-letter queue only now: the stand-in does not push a message dead-lettered while a
    # dead-letter receiver is already waiting (reported to its owner).
    time.sleep(0.5)
    dead = dead_letters(connection, queue, wait_s=5)
    assert len(dead) == 1
    assert json.loads(b"".join(dead[0].body))["id"] == "bad"
    assert dead[0].dead_letter_reason == "MaxDeliveryCountExceeded"
    attempts = calls(host, "start", "bad")
    assert len(attempts) == DEFAULT_MAX_DELIVERY_COUNT
    counts = [a["delivery_count"] for a in attempts]
    assert counts == sorted(counts)
    assert len(set(counts)) == DEFAULT_MAX_DELIVERY_COUNT
    log = host.log()
    assert log.count("Executed 'Functions.handle' (Failed") == DEFAULT_MAX_DELIVERY_COUNT
    assert "ValueError: failing bad on purpose" in log


def test_max_concurrent_calls_caps_parallel_invocations(
    start_host: StartHost, servicebus_service: ServiceBus, names: Names
) -> None:
    queue, connection = names.queue("sb"), servicebus_service.connection_string
    host = start_host("servicebus_app", env=sb_env(connection, queue))
    send(connection, queue, *({"id": f"s{i}", "action": "sleep", "seconds": 0.6} for i in range(7)))
    wait_until(lambda: len(calls(host, "end")) == 7, 20, "seven invocations")
    peak = max(r["running"] for r in calls(host, "start"))
    assert peak == 3  # maxConcurrentCalls in the app's host.json
    assert active_messages(connection, queue) == 0


def test_a_timed_out_invocation_is_cancelled_and_its_message_abandoned(
    start_host: StartHost, servicebus_service: ServiceBus, names: Names
) -> None:
    queue, connection = names.queue("sb"), servicebus_service.connection_string
    host = start_host("servicebus_app", env=sb_env(connection, queue), grace_s=1)
    send(connection, queue, {"id": "slow", "action": "sleep", "seconds": 30})
    wait_until(lambda: len(calls(host, "start", "slow")) >= 2, 15, "a redelivery after the timeout")
    first, second = calls(host, "start", "slow")[:2]
    assert second["delivery_count"] > first["delivery_count"]
    assert 2.5 < second["at"] - first["at"] < 6
    assert "Timeout value of 00:00:03 exceeded by function 'Functions.handle'" in host.log()
    assert calls(host, "end", "slow") == []


@pytest.fixture(scope="module")
def short_lock_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker of its own whose queue has a 5 s lock (the shared one auto-creates 1 min locks)."""
    root = tmp_path_factory.mktemp("short-lock-broker")
    config = write_config(root / "config.json", {SHORT_LOCK_QUEUE: {"LockDuration": "PT5S", "MaxDeliveryCount": 5}})
    port = free_port()
    process = broker(config, port, root / "broker.log").start(timeout_s=30)
    try:
        yield connection_string(port)
    finally:
        process.stop()


def test_locks_are_renewed_while_the_function_runs(start_host: StartHost, short_lock_broker: str) -> None:
    env = sb_env(short_lock_broker, SHORT_LOCK_QUEUE, AzureFunctionsJobHost__functionTimeout="00:00:20")
    host = start_host("servicebus_app", env=env)
    send(short_lock_broker, SHORT_LOCK_QUEUE, {"id": "long", "action": "sleep", "seconds": 7})
    wait_until(lambda: len(calls(host, "end", "long")) == 1, 20, "the long invocation")
    host.wait_for_log("Executed 'Functions.handle' (Succeeded")
    time.sleep(1.0)
    assert len(calls(host, "start", "long")) == 1
    assert "failed" not in host.log().split("Executed 'Functions.handle' (Succeeded")[1]
    assert active_messages(short_lock_broker, SHORT_LOCK_QUEUE) == 0


def test_many_locks_renewed_at_once_keep_the_connection_alive(start_host: StartHost, short_lock_broker: str) -> None:
    """Sixteen invocations whose locks all come due together. The SDK's AutoLockRenewer renewed them
    concurrently, and concurrent management requests reach the session out of order: the broker closes the
    connection (amqp:session:invalid-field) and every lock and completion is lost. Fails with it."""
    env = sb_env(
        short_lock_broker,
        SHORT_LOCK_QUEUE,
        AzureFunctionsJobHost__functionTimeout="00:00:20",
        AzureFunctionsJobHost__extensions__serviceBus__maxConcurrentCalls="16",
    )
    host = start_host("servicebus_app", env=env)
    ids = [f"many-{i}" for i in range(16)]
    send(short_lock_broker, SHORT_LOCK_QUEUE, *({"id": i, "action": "sleep", "seconds": 7} for i in ids))
    wait_until(lambda: len(calls(host, "end")) >= len(ids), 30, "every invocation to end")
    wait_until(lambda: host.log().count("Executed 'Functions.handle' (Succeeded") >= len(ids), 10, "the executions")
    time.sleep(1.0)
    log = host.log()
    assert sorted(c["id"] for c in calls(host, "start")) == sorted(ids), "each message delivered once"
    assert "failed" not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert active_messages(short_lock_broker, SHORT_LOCK_QUEUE) == 0


def test_lock_renewal_stops_at_max_auto_lock_renewal_duration(start_host: StartHost, short_lock_broker: str) -> None:
    env = sb_env(
        short_lock_broker,
        SHORT_LOCK_QUEUE,
        AzureFunctionsJobHost__functionTimeout="00:00:20",
        AzureFunctionsJobHost__extensions__serviceBus__maxAutoLockRenewalDuration="00:00:02",
        AzureFunctionsJobHost__extensions__serviceBus__maxConcurrentCalls="1",
    )
    host = start_host("servicebus_app", env=env, grace_s=1)
    send(short_lock_broker, SHORT_LOCK_QUEUE, {"id": "capped", "action": "sleep", "seconds": 7})
    wait_until(lambda: len(calls(host, "end", "capped")) >= 1, 20, "the first invocation to end")
    log = host.wait_for_log("completing message")
    assert "lock" in log.split("completing message")[1].splitlines()[0].lower()
    assert active_messages(short_lock_broker, SHORT_LOCK_QUEUE) == 1  # redelivered, not completed


def test_connections_are_read_from_the_named_setting_or_identity_based(tmp_path: Path) -> None:
    namespace = "example.servicebus.windows.net"
    client = service_bus_client("SB", {"SB__fullyQualifiedNamespace": namespace})
    assert client.fully_qualified_namespace == namespace
    with pytest.raises(ConfigError, match="SB__fullyQualifiedNamespace"):
        service_bus_client("SB", {})
