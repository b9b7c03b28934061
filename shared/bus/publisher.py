"""Publishing trigger events to Service Bus, behind a small interface.

The engine only needs `publish` (now or at a time) and `cancel`; tests of the engine can swap in
any object with that shape. `ServiceBusPublisher` is the real one (aio SDK, one reused sender).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any, Protocol

from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient, ServiceBusSender
from azure.servicebus.exceptions import ServiceBusError
from opentelemetry.trace import SpanKind

from shared.core.errors import TriggerUnavailable
from shared.core.events import TriggerEvent
from shared.core.redact import redact
from shared.core.settings import Settings
from shared.telemetry import tracing

log = logging.getLogger(__name__)


class Publisher(Protocol):
    async def publish(self, event: TriggerEvent, *, at: datetime | None = None) -> int | None:
        """Send `event` now, or schedule it for `at` (returns the sequence number to cancel it)."""
        ...

    async def cancel(self, sequence_number: int) -> None: ...

    async def close(self) -> None: ...


def to_message(event: TriggerEvent) -> ServiceBusMessage:
    """The event as a Service Bus message; the current trace context rides in its application properties."""
    properties: dict[str | bytes, Any] = {"queue": event.queue, "reason": event.reason.value}
    properties.update(tracing.event_properties())
    return ServiceBusMessage(
        event.encode(), content_type="application/json", subject=event.reason.value, application_properties=properties
    )


class ServiceBusPublisher:
    """One client and one sender per event loop, used by one call at a time, reopened after a failure."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._client: ServiceBusClient | None = None
        self._sender: ServiceBusSender | None = None
        self._credential: Any = None  # with an identity-based connection: closed with the client it served
        self._calls = asyncio.Lock()

    def _new_client(self) -> ServiceBusClient:
        conn = self._settings.servicebus
        # Few, fast retries: an unreachable broker must not hold up an HTTP answer; the fallback covers.
        options: dict[str, Any] = {"retry_total": 1, "retry_backoff_factor": 0.2, "retry_backoff_max": 1}
        if conn.connection_string is not None:
            return ServiceBusClient.from_connection_string(conn.connection_string, **options)
        from azure.identity.aio import DefaultAzureCredential  # only with a managed identity (storage.credential_for)

        assert conn.namespace is not None
        self._credential = DefaultAzureCredential(managed_identity_client_id=conn.client_id)
        return ServiceBusClient(conn.namespace, self._credential, **options)

    def _get_sender(self) -> ServiceBusSender:
        # No await between the check and the swap (here and in _reset): atomic on the event loop, no lock needed.
        if self._sender is None:
            self._client = self._new_client()
            self._sender = self._client.get_queue_sender(self._settings.trigger_queue)
        return self._sender

    async def _reset(self) -> None:
        sender, client, credential = self._sender, self._client, self._credential
        self._sender = self._client = self._credential = None
        for closeable in (sender, client, credential):
            if closeable is not None:
                try:
                    await closeable.close()
                except (TimeoutError, ServiceBusError, OSError) as e:
                    log.debug("closing a failed Service Bus link: %s", e)

    async def _one_at_a_time(self, action: Any) -> Any:
        # The SDK's sender opens its link lazily and is not safe for concurrent use: two first sends at once
        # both fail ('NoneType' has no attribute 'create_sender_link'), and a reset would cut off the others.
        async with self._calls:
            return await action(self._get_sender())

    async def _call(self, what: str, action: Any) -> Any:
        try:
            # The timeout covers the wait for the turn too: an unreachable broker must not queue callers up.
            return await asyncio.wait_for(self._one_at_a_time(action), self._settings.publish_timeout_s)
        except (TimeoutError, ServiceBusError, OSError, ValueError) as e:
            await self._reset()
            detail = redact(str(e).splitlines()[0] if str(e) else "")
            raise TriggerUnavailable(f"{what} on {self._settings.trigger_queue}: {type(e).__name__}: {detail}") from e

    async def publish(self, event: TriggerEvent, *, at: datetime | None = None) -> int | None:
        attributes: dict[str, Any] = {"queue_drain.reason": event.reason.value, "queue_drain.queue": event.queue}
        attributes |= {"queue_drain.slot": event.slot, "queue_drain.scheduled": at is not None}
        if event.batch_id is not None:
            attributes["queue_drain.batch_id"] = event.batch_id
        with tracing.span("queue_drain.publish", kind=SpanKind.PRODUCER, attributes=attributes):
            message = to_message(event)
            if at is None:
                await self._call(f"publish {event.reason.value}", lambda s: s.send_messages(message))
                return None
            numbers = await self._call(f"schedule {event.reason.value}", lambda s: s.schedule_messages(message, at))
            return int(numbers[0])

    async def cancel(self, sequence_number: int) -> None:
        await self._call("cancel scheduled event", lambda s: s.cancel_scheduled_messages(sequence_number))

    async def close(self) -> None:
        await self._reset()
