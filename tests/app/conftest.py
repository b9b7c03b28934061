"""Fixtures for the app's tests: per-test settings on the session Azurite, the app's registered functions,
and helpers to look into storage."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import azure.functions as func
import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.queue.aio import QueueClient

from shared import runtime
from shared.core.errors import TriggerUnavailable
from shared.core.events import Reason, TriggerEvent
from shared.core.settings import Settings
from shared.services import Services
from tests.conformance import function_checked
from tests.conftest import Names

UNREACHABLE_SERVICEBUS = (
    "Endpoint=sb://127.0.0.1:9;SharedAccessKeyName=RootManageSharedAccessKey;"
    "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
)


def app_environment(storage: str, servicebus: str, names: Names, **extra: str) -> dict[str, str]:
    """App settings for one test: its own queues and containers, fast retries."""
    env = {
        "AzureWebJobsStorage": storage,
        "ServiceBusConnection": servicebus,
        "TRIGGER_QUEUE": names.queue("trigger"),
        "FALLBACK_SCHEDULE": "*/5 * * * * *",
        "WORK_QUEUE": names.queue("work"),
        "BATCHES_CONTAINER": names.container("batches"),
        "RESULTS_CONTAINER": names.container("results"),
        "STATE_CONTAINER": names.container("state"),
        "PUBLISH_TIMEOUT_S": "3",
        "RETRY_BASE_DELAY_MS": "0",
        "RETRY_MAX_DELAY_MS": "0",
    }
    env.update(extra)
    return env


@dataclass
class RecordingPublisher:
    """Stands in for Service Bus where an engine test must see exactly which events were published, and when,
    or must make Service Bus unreachable on cue. The real publisher is tested against the real broker
    (test_servicebus_publishing.py and the end-to-end tests)."""

    down: bool = False
    events: list[tuple[TriggerEvent, datetime | None]] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)
    scheduled: dict[int, TriggerEvent] = field(default_factory=dict)  # by the sequence number it was given
    _next: int = 1

    async def publish(self, event: TriggerEvent, *, at: datetime | None = None) -> int | None:
        if self.down:
            raise TriggerUnavailable("Service Bus is down (recording publisher)")
        self.events.append((event, at))
        if at is None:
            return None
        self._next += 1
        self.scheduled[self._next] = event
        return self._next

    async def cancel(self, sequence_number: int) -> None:
        if self.down:
            raise TriggerUnavailable("Service Bus is down (recording publisher)")
        self.cancelled.append(sequence_number)

    async def close(self) -> None:
        return None

    def reasons(self) -> list[str]:
        return [e.reason.value for e, _ in self.events]


Configure = Callable[..., Services]


@pytest.fixture(autouse=True)
def handler_log() -> Iterator[None]:
    from tests.app import handlers

    handlers.reset()
    yield
    handlers.reset()


@pytest.fixture
async def configure(storage_connection_string: str, names: Names) -> AsyncIterator[Configure]:
    """`configure(**env)` points the app at this test's queues and returns its services (on this loop)."""

    def make(servicebus: str = UNREACHABLE_SERVICEBUS, publisher: Any = None, **extra: str) -> Services:
        env = app_environment(storage_connection_string, servicebus, names, **extra)
        runtime.configure(Settings.from_env(env))
        services = runtime.services()
        if publisher is not None:
            services.publisher = publisher
        return services

    yield make
    await runtime.close()


@pytest.fixture(scope="session")
def indexed_functions() -> list[Any]:
    """function_app.py indexed the way the Python worker does it: get_functions() once per app object."""
    baseline = {"TRIGGER_QUEUE": "queue-drain-trigger", "FALLBACK_SCHEDULE": "0 */1 * * * *"}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AzureWebJobsStorage", "UseDevelopmentStorage=true")
        mp.setenv("ServiceBusConnection", UNREACHABLE_SERVICEBUS)
        for k, v in baseline.items():
            mp.setenv(k, v)
        module = importlib.import_module("function_app")
        return list(module.app.get_functions())


@pytest.fixture(scope="session")
def app_functions(indexed_functions: list[Any]) -> Mapping[str, Callable[..., Any]]:
    """The app's user functions by name; the HTTP ones' answers are checked against the OpenAPI document
    (tests/conformance.py)."""
    return {
        f.get_function_name(): (
            function_checked(f.get_user_function()) if f.get_trigger().type == "httpTrigger" else f.get_user_function()
        )
        for f in indexed_functions
    }


def http_request(
    method: str, path: str, *, body: bytes = b"", headers: Mapping[str, str] | None = None, **route: str
) -> func.HttpRequest:
    return func.HttpRequest(
        method, f"http://localhost:7071{path}", headers=dict(headers or {}), params={}, route_params=route, body=body
    )


async def queue_depth(client: QueueClient) -> int:
    return int((await client.get_queue_properties()).approximate_message_count or 0)


async def drain_all(services: Services, queue: str | None = None, **kwargs: Any) -> Any:
    from shared.engine.drainer import Drainer

    return await Drainer(services, queue or services.settings.work_queue, **kwargs).run()


def retrying_once(configure: Configure, delay_ms: int) -> tuple[Services, RecordingPublisher]:
    """Services whose handler fails each `trans-*` item on its first attempt (`handlers.mixed`), retried exactly
    `delay_ms` later, and the publisher that records the wake-ups."""
    publisher = RecordingPublisher()
    delay = str(delay_ms)
    services = configure(
        publisher=publisher, HANDLER="tests.app.handlers:mixed", RETRY_BASE_DELAY_MS=delay, RETRY_MAX_DELAY_MS=delay,
        RETRY_JITTER="false",
    )  # fmt: skip
    return services, publisher


def the_retry_due(publisher: RecordingPublisher) -> datetime:
    """When the one retry-due wake-up published is to be delivered."""
    due = [at for e, at in publisher.events if e.reason is Reason.RETRY_DUE]
    assert len(due) == 1, publisher.events
    assert due[0] is not None, "a retry-due wake-up is scheduled"
    return due[0]


async def drain_once_due(services: Services, due: datetime) -> None:
    """The drain the retry-due wake-up brings, once it is delivered."""
    await asyncio.sleep(max(0.0, (due - datetime.now(timezone.utc)).total_seconds()))
    await drain_all(services)


def another_instance(services: Services) -> Services:
    """A second, independent set of services on the same settings: what another Functions instance has
    (its own clients, its own in-memory state), to contend for the same leases."""
    from shared.batch.verdicts import CommittedAttempts
    from shared.store.fallback_state import BackoffStore
    from shared.store.storage import Storage

    storage = Storage(services.settings, services.counter)
    return replace(
        services,
        storage=storage,
        backoff=BackoffStore(storage, services.settings),
        draining=set(),
        looked={},
        committed=CommittedAttempts(),
    )


def with_settings(services: Services, **changes: Any) -> Services:
    """The same services with some settings changed (for one call)."""
    return replace(services, settings=replace(services.settings, **changes))


async def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def unavailable() -> HttpResponseError:
    """A storage 503 as the SDK raises it (the app's boundary translates it as it would a real one)."""
    error = HttpResponseError(message="Server Busy")
    error.status_code = 503
    return error
