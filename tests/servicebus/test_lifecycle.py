"""Start, stop and what the broker says: bad configs fail at start naming the field, SIGINT/SIGTERM stop it
cleanly, and the log has one line per connection and per entity attach, and protocol errors with their condition."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import MessagingEntityNotFoundError

from devstack.broker import write_config
from devstack.procs import free_port
from tests.servicebus.conftest import start_broker
from tests.servicebus.sdk import opened, take

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]


def run_broker(*args: str, timeout_s: float = 15) -> subprocess.CompletedProcess[str]:
    """Run the stand-in in the foreground; for configurations that must make it exit at once."""
    return subprocess.run(
        [sys.executable, "-m", "emulators.servicebus", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def queue_config(tmp_path: Path, properties: dict[str, object], name: str = "q") -> Path:
    return write_config(tmp_path / "config.json", {name: properties})


@pytest.mark.parametrize(
    ("properties", "field"),
    [
        ({"LockDuration": "1 minute"}, "Queues[0].Properties.LockDuration"),
        ({"LockDuration": "PT0.5S"}, "Queues[0].Properties.LockDuration"),
        ({"LockDuration": "PT6M"}, "Queues[0].Properties.LockDuration"),
        ({"MaxDeliveryCount": 0}, "Queues[0].Properties.MaxDeliveryCount"),
        ({"MaxDeliveryCount": "10"}, "Queues[0].Properties.MaxDeliveryCount"),
        ({"DefaultMessageTimeToLive": "P"}, "Queues[0].Properties.DefaultMessageTimeToLive"),
        ({"DuplicateDetectionHistoryTimeWindow": "P8D"}, "Queues[0].Properties.DuplicateDetectionHistoryTimeWindow"),
        ({"RequiresDuplicateDetection": "yes"}, "Queues[0].Properties.RequiresDuplicateDetection"),
        ({"DeadLetteringOnMessageExpiration": 1}, "Queues[0].Properties.DeadLetteringOnMessageExpiration"),
        ({"RequiresSession": True}, "Queues[0].Properties.RequiresSession"),
        ({"ForwardTo": "elsewhere"}, "Queues[0].Properties.ForwardTo"),
        ({"LockDurationn": "PT1M"}, "Queues[0].Properties.LockDurationn"),
    ],
)
def test_a_bad_queue_property_fails_at_start_naming_the_field(
    tmp_path: Path, properties: dict[str, object], field: str
) -> None:
    result = run_broker("--config", str(queue_config(tmp_path, properties)), "--port", str(free_port()))
    assert result.returncode == 2
    assert f"UserConfig.Namespaces[0].{field}" in result.stderr


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ("{not json", "not valid JSON"),
        ({"Namespaces": []}, "UserConfig: a JSON object is required"),
        ({"UserConfig": {"Namespaces": []}}, "UserConfig.Namespaces: exactly one namespace"),
        ({"UserConfig": {"Namespaces": [{"Queues": []}]}}, "UserConfig.Namespaces[0].Name"),
        ({"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": [{"Name": "$bad"}]}]}}, "Queues[0].Name"),
        (
            {"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": [{"Name": "a"}, {"Name": "a"}]}]}},
            "Queues[1].Name: queue 'a' is defined twice",
        ),
        (
            {"UserConfig": {"Namespaces": [{"Name": "ns", "Topics": [{"Name": "t"}]}]}},
            "UserConfig.Namespaces[0].Topics",
        ),
    ],
)
def test_a_bad_config_document_fails_at_start_naming_the_problem(tmp_path: Path, document: object, field: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    result = run_broker("--config", str(path), "--port", str(free_port()))
    assert result.returncode == 2
    assert field in result.stderr


def test_a_missing_config_file_a_public_host_and_an_unusable_data_dir_are_refused(tmp_path: Path) -> None:
    missing = run_broker("--config", str(tmp_path / "nope.json"))
    assert missing.returncode == 2
    assert "cannot read the config file" in missing.stderr
    config = str(queue_config(tmp_path, {}))
    public = run_broker("--config", config, "--host", "0.0.0.0")
    assert public.returncode == 2
    assert "--host: '0.0.0.0' is not a loopback address" in public.stderr
    (tmp_path / "a-file").write_text("not a directory")
    unusable = run_broker("--config", config, "--data-dir", str(tmp_path / "a-file" / "data"))
    assert unusable.returncode == 2
    assert "--data-dir: cannot keep a database in" in unusable.stderr


def test_a_port_in_use_is_reported_and_the_broker_exits(tmp_path: Path) -> None:
    running = start_broker(tmp_path / "first", {"q": {}})
    try:
        result = run_broker("--config", str(queue_config(tmp_path, {})), "--port", str(running.port))
        assert result.returncode == 3
        assert f"cannot listen on 127.0.0.1:{running.port}" in result.stderr
    finally:
        running.process.stop()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_broker_cleanly_even_with_clients_connected(tmp_path: Path, signum: int) -> None:
    running = start_broker(tmp_path, {"q": {}})
    with (
        ServiceBusClient.from_connection_string(running.connection_string) as client,
        opened(client.get_queue_sender("q"), client.get_queue_receiver("q")) as (sender, receiver),
    ):
        sender.send_messages(ServiceBusMessage("before the stop"))
        take(receiver, 1)
        assert running.process.proc is not None
        running.process.proc.send_signal(signum)
        assert running.process.proc.wait(10) == 0
    log = running.log()
    assert f"received {signal.Signals(signum).name}" in log
    assert "shutting down: closing 2 connections" in log
    assert log.rstrip().endswith("emulators.servicebus: stopped")


def test_the_log_has_one_line_per_connection_and_attach_and_errors_with_their_condition(tmp_path: Path) -> None:
    running = start_broker(tmp_path, {"q": {}})
    try:
        with ServiceBusClient.from_connection_string(running.connection_string, retry_total=0) as client:
            with opened(client.get_queue_sender("q"), client.get_queue_receiver("q")) as (sender, receiver):
                sender.send_messages(ServiceBusMessage("logged"))
                take(receiver, 1)
                receiver.peek_messages(max_message_count=1)
            with pytest.raises(MessagingEntityNotFoundError), client.get_queue_sender("missing") as missing:
                missing.send_messages(ServiceBusMessage("nowhere"))
        log = running.log()
    finally:
        running.process.stop()
    assert len(re.findall(r" INFO emulators\.servicebus\.broker: connection #\d+ opened from 127\.0\.0\.1:", log)) == 3
    assert len(re.findall(r"attached sender to q$", log, re.MULTILINE)) == 1
    assert len(re.findall(r"attached receiver \(peek-lock\) to q$", log, re.MULTILINE)) == 1
    assert re.search(r"WARNING .*attach to 'missing' refused: amqp:not-found: ", log)
    assert " DEBUG " not in log
    assert "Traceback" not in log
