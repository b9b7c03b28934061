"""With --data-dir every accepted message, its delivery count, state and schedule survive a crash or a restart."""

from __future__ import annotations

import datetime
import threading
import time
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusMessageState, ServiceBusSubQueue
from azure.servicebus.exceptions import ServiceBusError

from tests.servicebus.conftest import RunningBroker, start_broker
from tests.servicebus.sdk import nothing_arrives, opened, take, texts, utcnow

pytestmark = pytest.mark.timeout(90)

QUEUES: dict[str, dict[str, object]] = {
    "durable": {"LockDuration": "PT2S", "MaxDeliveryCount": 5},
    "durable-dedupe": {"RequiresDuplicateDetection": True, "DuplicateDetectionHistoryTimeWindow": "PT1M"},
}


def restart(running: RunningBroker, root: Path, *, crash: bool) -> RunningBroker:
    """Stop the broker (kill -9, or SIGTERM) and start it again on the same port and data directory."""
    if crash:
        running.process.kill()
    else:
        assert running.process.stop() == 0
    return start_broker(root, QUEUES, data_dir=root / "data", port=running.port)


@pytest.fixture
def durable_root(tmp_path: Path) -> Path:
    return tmp_path


def test_a_crash_and_a_restart_lose_nothing(durable_root: Path) -> None:
    running = start_broker(durable_root, QUEUES, data_dir=durable_root / "data")
    try:
        numbers = fill_with_every_kind_of_state(running.connection_string)
        running = restart(running, durable_root, crash=True)
        check_every_kind_of_state(running.connection_string, numbers)
        running = restart(running, durable_root, crash=False)
        with ServiceBusClient.from_connection_string(running.connection_string) as client:
            with client.get_queue_receiver("durable") as receiver:
                assert receiver.peek_messages(max_message_count=100, sequence_number=1) == []
            with client.get_queue_receiver("durable", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead:
                assert len(dead.peek_messages(max_message_count=10)) == 1
    finally:
        running.process.stop()


def fill_with_every_kind_of_state(connection_string: str) -> dict[str, int]:
    """Active, abandoned, locked, deferred, dead-lettered and scheduled messages, and a remembered message id."""
    with (
        ServiceBusClient.from_connection_string(connection_string) as client,
        opened(
            client.get_queue_sender("durable"),
            client.get_queue_receiver("durable"),
            client.get_queue_sender("durable-dedupe"),
        ) as (sender, receiver, dedupe),
    ):
        sender.send_messages([ServiceBusMessage(f"plain {i}") for i in range(20)])
        sender.send_messages([ServiceBusMessage(name) for name in ("abandoned", "locked", "deferred", "dead")])
        [scheduled, cancelled] = sender.schedule_messages(
            [ServiceBusMessage("scheduled"), ServiceBusMessage("cancelled")], utcnow() + datetime.timedelta(seconds=4)
        )
        sender.cancel_scheduled_messages(cancelled)
        dedupe.send_messages(ServiceBusMessage("once", message_id="only-once"))
        by_body = {str(m): m for m in take(receiver, 24, complete=False)}
        assert len(by_body) == 24
        for i in range(20):
            receiver.abandon_message(by_body[f"plain {i}"])
        receiver.abandon_message(by_body["abandoned"])
        again = take(receiver, 21, complete=False)  # second deliveries, left locked
        assert sorted(texts(again)) == sorted([f"plain {i}" for i in range(20)] + ["abandoned"])
        receiver.defer_message(by_body["deferred"])
        receiver.dead_letter_message(by_body["dead"], reason="kept", error_description="across restarts")
        # "locked" and the second deliveries stay locked while the broker dies.
        return {
            "deferred": by_body["deferred"].sequence_number,
            "scheduled": scheduled,
            "last": max(m.sequence_number for m in by_body.values()),
        }


def check_every_kind_of_state(connection_string: str, numbers: dict[str, int]) -> None:
    with (
        ServiceBusClient.from_connection_string(connection_string) as client,
        opened(
            client.get_queue_sender("durable"),
            client.get_queue_receiver("durable"),
            client.get_queue_receiver("durable", sub_queue=ServiceBusSubQueue.DEAD_LETTER),
            client.get_queue_sender("durable-dedupe"),
            client.get_queue_receiver("durable-dedupe"),
        ) as (sender, receiver, dead, dedupe_sender, dedupe_receiver),
    ):
        peeked = {str(m): m for m in receiver.peek_messages(max_message_count=100, sequence_number=1)}
        assert set(peeked) == {f"plain {i}" for i in range(20)} | {"abandoned", "locked", "deferred", "scheduled"}
        assert peeked["deferred"].state == ServiceBusMessageState.DEFERRED
        assert peeked["scheduled"].state == ServiceBusMessageState.SCHEDULED
        assert peeked["scheduled"].sequence_number == numbers["scheduled"]
        # The locks taken before the crash still hold, then expire (2 s) and count as a failed delivery:
        # the plain ones and "abandoned" were abandoned once and locked again, "locked" was locked once.
        time.sleep(2.1)
        got = {str(m): m for m in take(receiver, 22, complete=False)}
        assert set(got) == {f"plain {i}" for i in range(20)} | {"abandoned", "locked"}
        assert {got[f"plain {i}"].delivery_count for i in range(20)} == {2}
        assert got["abandoned"].delivery_count == 2
        assert got["locked"].delivery_count == 1
        for message in got.values():
            receiver.complete_message(message)
        [deferred] = receiver.receive_deferred_messages([numbers["deferred"]])
        receiver.complete_message(deferred)
        [letter] = dead.peek_messages(max_message_count=5)
        assert (str(letter), letter.dead_letter_reason, letter.dead_letter_error_description) == (
            "dead",
            "kept",
            "across restarts",
        )
        [scheduled] = take(receiver, 1, wait_s=4)
        assert scheduled.sequence_number == numbers["scheduled"]
        sender.send_messages(ServiceBusMessage("after"))
        [after] = take(receiver, 1)
        assert after.sequence_number > numbers["last"]
        dedupe_sender.send_messages(ServiceBusMessage("twice", message_id="only-once"))
        assert texts(take(dedupe_receiver, 2, wait_s=1)) == ["once"]
        assert nothing_arrives(receiver)


def test_every_send_the_sdk_saw_succeed_survives_a_crash(durable_root: Path) -> None:
    running = start_broker(durable_root, QUEUES, data_dir=durable_root / "data")
    acknowledged: list[str] = []
    stop = threading.Event()

    def send_until_the_broker_dies() -> None:
        with (
            ServiceBusClient.from_connection_string(running.connection_string, retry_total=0) as client,
            client.get_queue_sender("durable") as sender,
        ):
            for i in range(100_000):
                if stop.is_set():
                    return
                try:
                    sender.send_messages(ServiceBusMessage(f"n{i}"), timeout=5)
                except ServiceBusError:
                    return
                acknowledged.append(f"n{i}")

    sending = threading.Thread(target=send_until_the_broker_dies)
    sending.start()
    try:
        deadline = time.monotonic() + 20
        while len(acknowledged) < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        running.process.kill()  # mid-stream: some send is in flight right now
        sending.join(30)
        stop.set()
        assert len(acknowledged) >= 200
        running = (
            restart(running, durable_root, crash=False)
            if running.process.running()
            else start_broker(durable_root, QUEUES, data_dir=durable_root / "data", port=running.port)
        )
        with (
            ServiceBusClient.from_connection_string(running.connection_string) as client,
            client.get_queue_receiver("durable") as receiver,
        ):
            stored = texts(receiver.peek_messages(max_message_count=len(acknowledged) + 10, sequence_number=1))
        assert set(acknowledged) <= set(stored)
        assert len(stored) <= len(acknowledged) + 1  # at most the one in flight when the broker died
    finally:
        stop.set()
        sending.join(30)
        running.process.stop()


def test_without_a_data_dir_a_restart_starts_empty(tmp_path: Path) -> None:
    running = start_broker(tmp_path, QUEUES)
    try:
        with (
            ServiceBusClient.from_connection_string(running.connection_string) as client,
            client.get_queue_sender("durable") as sender,
        ):
            sender.send_messages(ServiceBusMessage("fleeting"))
        running.process.stop()
        running = start_broker(tmp_path, QUEUES, port=running.port)
        with (
            ServiceBusClient.from_connection_string(running.connection_string) as client,
            client.get_queue_receiver("durable") as receiver,
        ):
            assert receiver.peek_messages(max_message_count=5, sequence_number=1) == []
        assert not list(tmp_path.glob("**/*.sqlite3"))
    finally:
        running.process.stop()
