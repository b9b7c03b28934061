"""The conformance suite's brokers: real stand-in processes on free ports, driven by the real azure-servicebus SDK.

One session broker serves the queues declared in `QUEUES` (one queue per test, so tests never share messages;
unknown names are *not* auto-created here, so the entity-not-found behaviour can be proven). Tests that restart
or kill a broker start their own with `start_broker`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient

from devstack.broker import broker, connection_string, write_config
from devstack.procs import ManagedProcess, ServiceStartError, free_port
from tests.conftest import unavailable

# Short locks and lifetimes keep the suite fast; the stand-in accepts locks down to 1 s.
QUEUES: dict[str, dict[str, object]] = {
    "send-one": {},
    "send-list": {},
    "send-batch": {},
    "properties": {},
    "complete": {},
    "abandon": {},
    "defer": {},
    "dead-letter": {},
    "max-delivery": {"MaxDeliveryCount": 3, "LockDuration": "PT5S"},
    "dlq-live": {"MaxDeliveryCount": 1, "LockDuration": "PT2S", "DeadLetteringOnMessageExpiration": True},
    "lock-expiry": {"LockDuration": "PT1S"},
    "renew-lock": {"LockDuration": "PT2S"},
    "auto-renew": {"LockDuration": "PT2S"},
    "mgmt-settle": {"LockDuration": "PT5S"},
    "receive-delete": {},
    "prefetch": {"LockDuration": "PT5S"},
    "release": {"LockDuration": "PT30S"},
    "peek": {},
    "schedule": {},
    "schedule-cancel": {},
    "schedule-send": {},
    "ttl-message": {},
    "ttl-queue": {"DefaultMessageTimeToLive": "PT1S"},
    "ttl-dead-letter": {"DefaultMessageTimeToLive": "PT1S", "DeadLetteringOnMessageExpiration": True},
    "dedupe": {"RequiresDuplicateDetection": True, "DuplicateDetectionHistoryTimeWindow": "PT2S"},
    "no-dedupe": {},
    "size": {},
    "aio": {"LockDuration": "PT3S"},  # the async AutoLockRenewer polls once a second: 3 s is its practical minimum
    "aio-receive-delete": {},
    "aio-dlq-live": {},
    "aio-errors": {"LockDuration": "PT1S"},
    "aio-rules": {
        "MaxDeliveryCount": 1,
        "DeadLetteringOnMessageExpiration": True,
        "RequiresDuplicateDetection": True,
        "DuplicateDetectionHistoryTimeWindow": "PT1M",
    },
    "many-links": {},
    "vanish": {},
    "silent-consumer": {"LockDuration": "PT1S"},
    "malformed": {},
    "dlq-send": {},
    "case": {},
    "connection": {},
    "concurrent-peek": {},
    "concurrent-renew": {"LockDuration": "PT30S"},
    "aio-concurrent-peek": {},
    "aio-concurrent-schedule": {},
    "lock-token-annotation": {},
    "delivery-annotations": {},
    "delivery-annotations-batch": {},
    "no-sessions": {},
    "one-big-frame": {},
}


@dataclass(frozen=True)
class RunningBroker:
    port: int
    connection_string: str
    process: ManagedProcess
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_broker(
    root: Path,
    queues: Mapping[str, Mapping[str, object]],
    *,
    data_dir: Path | None = None,
    port: int | None = None,
    auto_create_queues: bool = False,
) -> RunningBroker:
    """A stand-in process on a free port (or `port`, to restart one), already listening."""
    port = port or free_port()
    config = write_config(root / "config.json", queues)
    log_path = root / "broker.log"
    process = broker(config, port, log_path, data_dir=data_dir, auto_create_queues=auto_create_queues)
    try:
        process.start(timeout_s=30)
    except ServiceStartError as e:
        unavailable("Service Bus stand-in", e)
        raise
    return RunningBroker(port, connection_string(port), process, log_path)


@pytest.fixture(scope="session")
def conformance_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    running = start_broker(tmp_path_factory.mktemp("conformance"), QUEUES)
    try:
        yield running
    finally:
        running.process.stop()


@pytest.fixture
def client(conformance_broker: RunningBroker) -> Iterator[ServiceBusClient]:
    with ServiceBusClient.from_connection_string(conformance_broker.connection_string) as sb:
        yield sb


@pytest.fixture
def no_retry_client(conformance_broker: RunningBroker) -> Iterator[ServiceBusClient]:
    """For errors the SDK would otherwise retry for seconds before raising."""
    with ServiceBusClient.from_connection_string(conformance_broker.connection_string, retry_total=0) as sb:
        yield sb
