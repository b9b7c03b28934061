"""Session-wide Service Bus stand-in for everyone's tests: memory only, unknown queues auto-created.

Give each test its own queue name (the `names` fixture) and the stand-in creates it on first use.
Under CI=true a stand-in that cannot start is an error, never a skip (the rule of `tests/conftest.py`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devstack.broker import broker, connection_string
from devstack.procs import ManagedProcess, ServiceStartError, free_port
from tests.conftest import unavailable

SAMPLE_CONFIG = Path(__file__).resolve().parent.parent / "emulators" / "servicebus" / "config.json"


@dataclass(frozen=True)
class ServiceBus:
    connection_string: str
    port: int
    process: ManagedProcess


@pytest.fixture(scope="session")
def servicebus_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceBus]:
    root = tmp_path_factory.mktemp("servicebus")
    port = free_port()
    try:
        process = broker(SAMPLE_CONFIG, port, root / "servicebus.log", auto_create_queues=True).start(timeout_s=30)
    except ServiceStartError as e:
        unavailable("Service Bus stand-in", e)
        raise
    try:
        yield ServiceBus(connection_string(port), port, process)
    finally:
        process.stop()
