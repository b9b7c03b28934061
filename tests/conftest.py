"""Session-wide real services: one Azurite (and one Service Bus stand-in) on free loopback ports.

Every test gets unique queue/container names (`names` fixture), so tests never see each other's data.
Under CI=true a service that cannot start is an error, never a skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devstack.azurite import AzuritePorts, azurite, connection_string
from devstack.procs import ManagedProcess, ServiceStartError

pytest_plugins = ["tests.fixtures_servicebus", "tests.conformance"]

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`pytest -n N --dist loadscope` (make test) schedules by file, and tests/hostile whole (tests/scheduling.py)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from tests.scheduling import FileGroups

    return FileGroups(config, log)


def unavailable(what: str, error: Exception) -> None:
    """Fail under CI; skip (with the reason) on a developer machine that lacks the service."""
    message = f"{what} is unavailable: {error}"
    if IN_CI:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@dataclass(frozen=True)
class Azurite:
    connection_string: str
    ports: AzuritePorts
    data_dir: Path
    process: ManagedProcess


@pytest.fixture(scope="session")
def azurite_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    root = tmp_path_factory.mktemp("azurite")
    ports = AzuritePorts.free()
    try:
        process = azurite(root / "data", ports, root / "azurite.log").start(timeout_s=60)
    except ServiceStartError as e:
        unavailable("Azurite", e)
        raise
    try:
        yield Azurite(connection_string(ports), ports, root / "data", process)
    finally:
        process.stop()


@pytest.fixture
def storage_connection_string(azurite_service: Azurite) -> str:
    return azurite_service.connection_string


@dataclass(frozen=True)
class Names:
    """Unique, valid Azure names for one test (queues: lowercase, digits, dashes, 3-63 chars)."""

    token: str

    def queue(self, role: str = "work") -> str:
        return f"{role}-{self.token}"

    def container(self, role: str) -> str:
        return f"{role}-{self.token}"


@pytest.fixture
def names() -> Names:
    return Names(uuid.uuid4().hex[:12])
