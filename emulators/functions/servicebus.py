"""Service Bus triggers: one peek-lock receiver per function, settled the way the extension settles.

Success completes the message and an exception (or a timeout) abandons it, when autoCompleteMessages is
on; the broker then redelivers it with DeliveryCount + 1 and dead-letters it after MaxDeliveryCount.
Locks are renewed (one request at a time, `LockKeeper`) up to maxAutoLockRenewalDuration.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from azure.functions.servicebus import ServiceBusMessage
from azure.servicebus import ServiceBusReceivedMessage, ServiceBusReceiveMode
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver
from azure.servicebus.amqp import AmqpMessageBodyType
from azure.servicebus.exceptions import ServiceBusError

from emulators.functions.config import ServiceBusOptions
from emulators.functions.errors import ConfigError, IndexingError
from emulators.functions.indexing import FunctionSpec
from emulators.functions.invoke import Invoker

log = logging.getLogger(__name__)

SERVICE_BUS_TRIGGER = "serviceBusTrigger"
RECEIVE_WAIT_S = 1.0  # how long one receive call waits: also how quickly a stop is noticed
RECONNECT_DELAY_S = 5.0


@dataclass(frozen=True)
class ServiceBusTrigger:
    spec: FunctionSpec
    connection: str
    queue_name: str | None
    topic_name: str | None
    subscription_name: str | None
    auto_complete: bool

    @property
    def entity(self) -> str:
        if self.queue_name:
            return self.queue_name
        return f"{self.topic_name}/Subscriptions/{self.subscription_name}"


def service_bus_trigger(spec: FunctionSpec, options: ServiceBusOptions) -> ServiceBusTrigger:
    trigger = spec.trigger
    if str(trigger.get("cardinality") or "one").lower() == "many":
        raise IndexingError("cardinality 'many' (batches) is not supported by the local host")
    if trigger.get("isSessionsEnabled"):
        raise IndexingError("session-enabled Service Bus triggers are not supported by the local host")
    if not trigger.get("queueName") and not (trigger.get("topicName") and trigger.get("subscriptionName")):
        raise IndexingError("a Service Bus trigger needs queue_name, or topic_name and subscription_name")
    auto_complete = trigger.get("autoCompleteMessages")
    return ServiceBusTrigger(
        spec=spec,
        connection=str(trigger.get("connection") or "AzureWebJobsServiceBus"),
        queue_name=trigger.get("queueName"),
        topic_name=trigger.get("topicName"),
        subscription_name=trigger.get("subscriptionName"),
        auto_complete=options.auto_complete_messages if auto_complete is None else bool(auto_complete),
    )


def service_bus_client(connection: str, settings: Mapping[str, str]) -> ServiceBusClient:
    """From the named app setting: a connection string, or `<name>__fullyQualifiedNamespace` (identity)."""
    value = settings.get(connection)
    if value:
        return ServiceBusClient.from_connection_string(value)
    namespace = settings.get(f"{connection}__fullyQualifiedNamespace")
    if namespace:
        from azure.identity.aio import DefaultAzureCredential

        return ServiceBusClient(namespace, credential=DefaultAzureCredential())
    raise ConfigError(
        f"Service Bus connection '{connection}' does not exist: set the app setting {connection} "
        f"(connection string) or {connection}__fullyQualifiedNamespace (identity-based)"
    )


def to_function_message(message: ServiceBusReceivedMessage) -> ServiceBusMessage:
    """The azure.functions view of a received message (what the worker builds from the host's data)."""
    properties = _text_keys(message.application_properties)
    return ServiceBusMessage(
        body=_body_bytes(message),
        trigger_metadata=_trigger_metadata(message, properties),
        application_properties=properties,
        user_properties=properties,
        content_type=message.content_type,
        correlation_id=message.correlation_id,
        dead_letter_error_description=message.dead_letter_error_description,
        dead_letter_reason=message.dead_letter_reason,
        dead_letter_source=message.dead_letter_source,
        delivery_count=message.delivery_count,
        enqueued_sequence_number=message.enqueued_sequence_number,
        enqueued_time_utc=message.enqueued_time_utc,
        expires_at_utc=message.expires_at_utc,
        label=message.subject,
        locked_until=message.locked_until_utc,
        lock_token=str(message.lock_token) if message.lock_token else None,
        message_id=str(message.message_id or ""),
        partition_key=message.partition_key,
        reply_to=message.reply_to,
        reply_to_session_id=message.reply_to_session_id,
        scheduled_enqueue_time_utc=message.scheduled_enqueue_time_utc,
        sequence_number=message.sequence_number,
        session_id=message.session_id,
        state=int(message.state) if message.state is not None else None,
        subject=message.subject,
        time_to_live=message.time_to_live,
        to=message.to,
    )


def _body_bytes(message: ServiceBusReceivedMessage) -> bytes:
    if message.body_type == AmqpMessageBodyType.DATA:
        return b"".join(message.body)
    value = message.body
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, default=str).encode()


def _text_keys(properties: Mapping[Any, Any] | None) -> dict[str, Any]:
    def text(value: Any) -> Any:
        return value.decode(errors="replace") if isinstance(value, bytes) else value

    return {str(text(key)): text(value) for key, value in (properties or {}).items()}


def _trigger_metadata(message: ServiceBusReceivedMessage, properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "MessageId": message.message_id,
        "DeliveryCount": message.delivery_count,
        "SequenceNumber": message.sequence_number,
        "EnqueuedTimeUtc": message.enqueued_time_utc.isoformat() if message.enqueued_time_utc else None,
        "LockToken": str(message.lock_token) if message.lock_token else None,
        "ContentType": message.content_type,
        "ApplicationProperties": properties,
    }


class ServiceBusListener:
    """Receives for one function with up to maxConcurrentCalls invocations at once."""

    def __init__(
        self,
        trigger: ServiceBusTrigger,
        settings: Mapping[str, str],
        options: ServiceBusOptions,
        invoker: Invoker,
    ) -> None:
        self.trigger = trigger
        self.settings = settings
        self.options = options
        self.invoker = invoker
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        return self.trigger.spec.full_name

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                await self._run_client(stopping)
            except ServiceBusError as e:
                log.error("'%s': Service Bus receiver for '%s' failed: %s", self.name, self.trigger.entity, e)
                await _wait(stopping, RECONNECT_DELAY_S)

    async def _run_client(self, stopping: asyncio.Event) -> None:
        client = service_bus_client(self.trigger.connection, self.settings)
        async with client, self._receiver(client) as receiver:
            locks = LockKeeper(receiver, self.options.max_auto_lock_renewal_duration_s, self._on_renew_failure)
            log.info("'%s': receiving from '%s' (peek-lock)", self.name, self.trigger.entity)
            try:
                await self._receive_loop(receiver, locks, stopping)
            finally:
                await self._drain()

    def _receiver(self, client: ServiceBusClient) -> ServiceBusReceiver:
        common: dict[str, Any] = {
            "receive_mode": ServiceBusReceiveMode.PEEK_LOCK,
            "prefetch_count": self.options.prefetch_count,
        }
        if self.trigger.queue_name:
            return client.get_queue_receiver(self.trigger.queue_name, **common)
        return client.get_subscription_receiver(
            str(self.trigger.topic_name), str(self.trigger.subscription_name), **common
        )

    async def _receive_loop(self, receiver: ServiceBusReceiver, locks: LockKeeper, stopping: asyncio.Event) -> None:
        limit = max(1, self.options.max_concurrent_calls)
        while not stopping.is_set():
            free = limit - len(self._tasks)
            if free <= 0:
                await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
                continue
            # One message per call, as the extension's message pump hands each message over as it arrives:
            # asking for more makes the SDK linger 0.2 s after the first one for the rest (prefetched
            # messages still come straight from the local buffer).
            messages = await receiver.receive_messages(max_message_count=1, max_wait_time=RECEIVE_WAIT_S)
            for message in messages:
                task = asyncio.create_task(self._handle(receiver, locks, message))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _drain(self) -> None:
        """On stop: settle what is in flight (the invoker cancels invocations past the grace period)."""
        if self._tasks:
            log.info("'%s': waiting for %d in-flight message(s)", self.name, len(self._tasks))
            await asyncio.wait(set(self._tasks))

    async def _handle(
        self, receiver: ServiceBusReceiver, locks: LockKeeper, message: ServiceBusReceivedMessage
    ) -> None:
        log.info(
            "Trigger Details: MessageId: %s, SequenceNumber: %s, DeliveryCount: %s, EnqueuedTimeUtc: %s, "
            "LockedUntilUtc: %s",
            message.message_id,
            message.sequence_number,
            message.delivery_count,
            message.enqueued_time_utc,
            message.locked_until_utc,
        )
        reason = f"New ServiceBus message detected on '{self.trigger.entity}'."
        renewing = locks.keep(message)
        try:
            outcome = await self.invoker.invoke(self.trigger.spec, to_function_message(message), reason)
        finally:
            await locks.release(renewing)
        if self.trigger.auto_complete:
            await self._settle(receiver, message, complete=outcome.succeeded)

    async def _settle(
        self, receiver: ServiceBusReceiver, message: ServiceBusReceivedMessage, *, complete: bool
    ) -> None:
        try:
            if complete:
                await receiver.complete_message(message)
            else:
                await receiver.abandon_message(message)
        except (ServiceBusError, ValueError) as e:  # ValueError: the receiver was shut down meanwhile
            action = "completing" if complete else "abandoning"
            log.warning("'%s': %s message %s failed: %s", self.name, action, message.message_id, e)

    async def _on_renew_failure(self, renewable: ServiceBusReceivedMessage, error: Exception | None) -> None:
        log.warning("'%s': lock renewal stopped for message %s: %s", self.name, renewable.message_id, error)


class LockKeeper:
    """Renews the lock of each message in flight until it is settled or `max_duration_s` has passed, as the
    extension's auto lock renewal does; a failed renewal is reported once and renewal of that message stops.

    Renewals go one at a time. The SDK's AutoLockRenewer renews concurrently, and two management requests
    sent at once can reach the session out of order (delivery-id 2 before 1), which a conforming broker
    rejects by closing the connection (amqp:session:invalid-field); every receive then fails with it."""

    def __init__(
        self,
        receiver: ServiceBusReceiver,
        max_duration_s: float,
        on_failure: Callable[[ServiceBusReceivedMessage, Exception], Awaitable[None]],
    ) -> None:
        self._receiver = receiver
        self._max_duration_s = max_duration_s
        self._on_failure = on_failure
        self._one_at_a_time = asyncio.Lock()

    def keep(self, message: ServiceBusReceivedMessage) -> asyncio.Task[None]:
        return asyncio.create_task(self._renew(message, time.monotonic() + self._max_duration_s))

    async def release(self, task: asyncio.Task[None]) -> None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def _renew(self, message: ServiceBusReceivedMessage, until: float) -> None:
        while message.locked_until_utc is not None:
            left = (message.locked_until_utc - datetime.now(timezone.utc)).total_seconds()
            # Renew with a quarter of the lock left (at least a second), never past the renewal duration.
            wait = max(0.0, left - max(1.0, left / 4))
            if time.monotonic() + wait >= until:
                return
            await asyncio.sleep(wait)
            try:
                async with self._one_at_a_time:
                    await self._receiver.renew_message_lock(message)
            except (ServiceBusError, ValueError) as e:
                await self._on_failure(message, e)
                return


async def _wait(stopping: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stopping.wait(), seconds)
    except TimeoutError:
        return
