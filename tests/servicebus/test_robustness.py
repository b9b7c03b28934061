"""Load and misuse: many connections and links, a client that vanishes mid-transfer, malformed frames.

The broker must log the condition, drop only the offending connection and keep serving everyone else.
"""

from __future__ import annotations

import re
import resource
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from proton import Message

from devstack.broker import connection_string, write_config
from devstack.procs import ManagedProcess, free_port
from tests.conftest import unavailable
from tests.servicebus.conftest import RunningBroker
from tests.servicebus.rawamqp import RawClient, raw_frame
from tests.servicebus.sdk import opened, take, texts

pytestmark = pytest.mark.timeout(90)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bystander(conformance_broker: RunningBroker) -> Iterator[tuple[Any, Any]]:
    """An ordinary SDK client that must keep working whatever the other connections do."""
    with (
        ServiceBusClient.from_connection_string(conformance_broker.connection_string) as client,
        opened(client.get_queue_sender("malformed"), client.get_queue_receiver("malformed")) as pair,
    ):
        yield pair


def still_served(bystander: tuple[Any, Any], note: str) -> bool:
    sender, receiver = bystander
    sender.send_messages(ServiceBusMessage(note))
    return texts(take(receiver, 1)) == [note]


def test_many_connections_and_links_at_once_deliver_every_message_exactly_once(
    conformance_broker: RunningBroker,
) -> None:
    senders, receivers, per_sender = 16, 8, 25
    expected = {f"s{s}-m{m}" for s in range(senders) for m in range(per_sender)}
    received: list[str] = []
    lock = threading.Lock()
    idle_links = [RawClient(conformance_broker.port) for _ in range(3)]
    for raw in idle_links:  # 150 consumers without credit: the broker must step over them cheaply
        raw.put_token("many-links")
        for _ in range(50):
            raw.receiver("many-links")

    def send(s: int) -> None:
        with (
            ServiceBusClient.from_connection_string(conformance_broker.connection_string) as client,
            client.get_queue_sender("many-links") as sender,
        ):
            for first in range(0, per_sender, 5):
                sender.send_messages([ServiceBusMessage(f"s{s}-m{m}") for m in range(first, first + 5)])

    def receive() -> None:
        deadline = time.monotonic() + 30
        with (
            ServiceBusClient.from_connection_string(conformance_broker.connection_string) as client,
            client.get_queue_receiver("many-links", prefetch_count=10) as receiver,
        ):
            while time.monotonic() < deadline:
                with lock:
                    if len(received) >= len(expected):
                        return
                for message in receiver.receive_messages(max_message_count=10, max_wait_time=1):
                    receiver.complete_message(message)
                    with lock:
                        received.append(str(message))

    with ThreadPoolExecutor(max_workers=senders + receivers) as pool:
        futures = [pool.submit(receive) for _ in range(receivers)] + [pool.submit(send, s) for s in range(senders)]
        for future in futures:
            future.result(timeout=60)
    for raw in idle_links:
        raw.drop()
    assert len(received) == len(expected)
    assert set(received) == expected


def test_a_client_that_vanishes_mid_transfer_leaves_nothing_behind(
    conformance_broker: RunningBroker, bystander: tuple[Any, Any]
) -> None:
    raw = RawClient(conformance_broker.port)
    raw.put_token("vanish")
    link = raw.sender("vanish")
    whole = Message(body=b"v" * 200_000).encode()
    raw.send_part_of(link, whole[:120_000])
    raw.pump(timeout_s=0.3)  # let the first frames reach the broker
    raw.drop()
    assert still_served(bystander, "after a vanished client")
    with (
        ServiceBusClient.from_connection_string(conformance_broker.connection_string) as client,
        client.get_queue_receiver("vanish") as receiver,
    ):
        assert receiver.peek_messages(max_message_count=5, sequence_number=1) == []


def test_a_lock_held_by_a_silent_consumer_ends_on_time_for_a_receiver_already_waiting(
    conformance_broker: RunningBroker,
) -> None:
    """No settlement, send or attach follows the lock: only the broker's own timer can end it."""
    waiting, silent = RawClient(conformance_broker.port), RawClient(conformance_broker.port)
    try:
        for raw in (waiting, silent):
            raw.put_token("silent-consumer")
        patient = waiting.receiver("silent-consumer")  # attached, no credit yet
        link = silent.sender("silent-consumer")
        sent = link.delivery(b"m")
        link.send(Message(body="held and forgotten").encode())
        link.advance()
        assert silent.pump(lambda: sent.remote_state is not None), "the send was not settled"
        taker = silent.receiver("silent-consumer")
        taker.flow(1)
        assert silent.pump(lambda: taker.queued > 0), "the silent consumer got nothing"
        patient.flow(1)  # the queue is empty now; the message comes back when the 1 s lock ends
        assert waiting.pump(lambda: patient.queued > 0, timeout_s=10), "the expired lock was never noticed"
        delivery = patient.current
        assert delivery is not None
        message = Message()
        message.decode(patient.recv(delivery.pending) or b"")
    finally:
        waiting.drop()
        silent.drop()
    assert (message.body, message.delivery_count) == ("held and forgotten", 1)


def connection_numbers(log: str) -> set[str]:
    return set(re.findall(r"connection (#\d+) ", log))


@pytest.mark.parametrize(
    ("case", "data"),
    [
        ("an unknown performative", raw_frame(b"\x00\x53\x99\x45")),
        ("a frame larger than any max-frame-size", struct.pack(">IBBH", 0x7FFFFFF0, 2, 0, 0) + b"\x00" * 64),
        ("a truncated open frame body", raw_frame(b"\x00\x53\x10\xc0\x20\x05\xa1")),
        ("a frame size smaller than its header", struct.pack(">IBBH", 4, 2, 0, 0)),
    ],
)
def test_a_malformed_frame_closes_only_that_connection_and_is_logged_with_its_condition(
    conformance_broker: RunningBroker, bystander: tuple[Any, Any], case: str, data: bytes
) -> None:
    raw = RawClient(conformance_broker.port)
    assert raw.pump(lambda: bool(raw.connection.state & raw.connection.REMOTE_ACTIVE)), "connection did not open"
    before = conformance_broker.log()
    raw.write_raw(data)
    assert raw.wait_closed_by_peer(), f"the broker kept a connection open after {case}"
    assert still_served(bystander, f"after {case}")
    new_lines = conformance_broker.log()[len(before) :]
    assert re.search(r"WARNING .*dropped: amqp:[a-z:-]+", new_lines), new_lines


def test_a_client_speaking_another_protocol_is_dropped(
    conformance_broker: RunningBroker, bystander: tuple[Any, Any]
) -> None:
    before = conformance_broker.log()
    with socket.create_connection(("127.0.0.1", conformance_broker.port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        reply = sock.recv(1024)
        sock.settimeout(5)
        while sock.recv(1024):  # the broker answers with its protocol header, then closes
            pass
    assert reply.startswith(b"AMQP")
    assert still_served(bystander, "after an HTTP request")
    assert "dropped: amqp:connection:framing-error" in conformance_broker.log()[len(before) :]


def test_more_connections_than_select_can_watch_are_served(
    conformance_broker: RunningBroker, bystander: tuple[Any, Any]
) -> None:
    """proton's own loop would die at descriptor 1024; the stand-in waits with poll(2) instead."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1_400:
        unavailable("1,400 open files per process", OSError(f"this OS allows only {hard}"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1_400), hard))
    sockets = []
    try:
        for _ in range(1_100):
            sock = socket.create_connection(("127.0.0.1", conformance_broker.port), timeout=5)
            sock.sendall(b"AMQP\x03\x01\x00\x00")  # a client that starts SASL and then says nothing more
            sockets.append(sock)
        assert still_served(bystander, "with 1,100 idle connections open")
    finally:
        for sock in sockets:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert still_served(bystander, "after they left")


# Start the stand-in with a hard limit of 48 open files, so that accepting connections runs out.
LOW_FILE_LIMIT = (
    "import resource, runpy; resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48)); "
    "runpy.run_module('emulators.servicebus', run_name='__main__', alter_sys=True)"
)


def test_running_out_of_file_descriptors_pauses_accepting_and_the_broker_survives(tmp_path: Path) -> None:
    port = free_port()
    config = write_config(tmp_path / "config.json", {"fd": {}})
    argv = [sys.executable, "-c", LOW_FILE_LIMIT, "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    process = ManagedProcess("servicebus-48-files", argv, [port], tmp_path / "broker.log", cwd=REPO).start(30)
    sockets = []
    try:
        with (
            ServiceBusClient.from_connection_string(connection_string(port)) as client,
            opened(client.get_queue_sender("fd"), client.get_queue_receiver("fd")) as pair,
        ):
            for _ in range(60):
                sockets.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            deadline = time.monotonic() + 10
            while "cannot accept a connection" not in process.tail() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert "cannot accept a connection: Too many open files" in process.tail()
            assert still_served(pair, "while out of descriptors")
            for sock in sockets:
                sock.close()
            sockets.clear()
            with (
                ServiceBusClient.from_connection_string(connection_string(port)) as late_client,
                late_client.get_queue_sender("fd") as late_sender,
            ):
                late_sender.send_messages(ServiceBusMessage("a new connection, later"))
            assert texts(take(pair[1], 1)) == ["a new connection, later"]
        assert process.stop() == 0
    finally:
        for sock in sockets:
            sock.close()
        process.stop()
