"""Runtime counts over `--status-port`, under both readings of whether a locked message is active."""

from __future__ import annotations

import datetime
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue

from devstack.broker import ROOT, connection_string, write_config
from devstack.procs import LOOPBACK, ManagedProcess, free_port, python_module
from tests.servicebus.sdk import take, utcnow

pytestmark = pytest.mark.timeout(90)

QUEUE = "counted"


def counts(status_port: int) -> dict[str, int]:
    with urllib.request.urlopen(f"http://{LOOPBACK}:{status_port}/counts", timeout=10) as response:
        answer: dict[str, dict[str, int]] = json.load(response)
    return answer[QUEUE]


def start(root: Path, *, option: str | None, config_option: bool | None) -> tuple[ManagedProcess, str, int]:
    config = write_config(root / "config.json", {QUEUE: {"LockDuration": "PT1M"}})
    if config_option is not None:
        document = json.loads(config.read_text())
        document["StandIn"] = {"LockedCountsAsActive": config_option}
        config.write_text(json.dumps(document))
    port, status_port = free_port(), free_port()
    args = ["--config", str(config), "--host", LOOPBACK, "--port", str(port), "--status-port", str(status_port)]
    if option is not None:
        args += ["--locked-counts-as-active", option]
    process = ManagedProcess(
        "servicebus", python_module("emulators.servicebus", *args), [port, status_port], root / "broker.log", cwd=ROOT
    )
    process.start(timeout_s=30)
    return process, connection_string(port), status_port


@pytest.fixture(
    params=[(None, None, True), ("false", None, False), (None, False, False), ("true", False, True)],
    ids=["default", "option-false", "config-false", "option-over-config"],
)
def reading(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, int, bool]]:
    option, config_option, locked_is_active = request.param
    process, conn_str, status_port = start(tmp_path, option=option, config_option=config_option)
    try:
        yield conn_str, status_port, locked_is_active
    finally:
        process.stop()


def test_counts_report_active_scheduled_and_dead_letter_messages_with_locked_ones_as_configured(
    reading: tuple[str, int, bool],
) -> None:
    conn_str, status_port, locked_is_active = reading
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender(QUEUE) as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(4)])
            sender.schedule_messages(ServiceBusMessage("later"), utcnow() + datetime.timedelta(hours=1))
        assert counts(status_port) == {
            "active_message_count": 4,
            "scheduled_message_count": 1,
            "dead_letter_message_count": 0,
            "locked_message_count": 0,
            "deferred_message_count": 0,
            "total_message_count": 5,
        }
        with client.get_queue_receiver(QUEUE, prefetch_count=0) as receiver:
            first, second = take(receiver, 2, complete=False)
            receiver.dead_letter_message(first, reason="test")
            locked = counts(status_port)
            assert locked["locked_message_count"] == 1
            assert locked["active_message_count"] == (3 if locked_is_active else 2)
            assert locked["dead_letter_message_count"] == 1
            assert locked["total_message_count"] == 5
            receiver.complete_message(second)
        settled = counts(status_port)
        assert (settled["active_message_count"], settled["locked_message_count"]) == (2, 0)
        with client.get_queue_receiver(QUEUE, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead_letters:
            assert len(take(dead_letters, 1)) == 1
        assert counts(status_port)["dead_letter_message_count"] == 0
