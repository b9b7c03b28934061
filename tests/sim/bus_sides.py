"""The two sides the bus conformance tests run each scenario on: `sim.bus` on the simulation's virtual-time loop, and
the project's Service Bus stand-in through the app's own publisher and the SDK's receiver, on a background loop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from azure.servicebus import ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver

from devstack.broker import connection_string
from devstack.procs import free_port
from shared.bus.publisher import Publisher, ServiceBusPublisher
from shared.core.events import TriggerEvent
from shared.core.settings import ServiceBusConnection, Settings, StorageConnection
from sim import bus as simbus
from sim.clock import world_time
from sim.loop import SimLoop
from sim.storage.account import CONNECTION_STRING
from tests.fixtures_servicebus import SAMPLE_CONFIG

log = logging.getLogger(__name__)

PUBLISH_TIMEOUT_S = 3.0  # as the simulation's scenarios set it


def trigger_queue_property(name: str) -> Any:
    """A property of the app's trigger queue in the stand-in's (and the official emulator's) sample config."""
    config = json.loads(SAMPLE_CONFIG.read_text(encoding="utf-8"))
    queue = config["UserConfig"]["Namespaces"][0]["Queues"][0]
    assert queue["Name"] == "queue-drain-trigger"
    return queue["Properties"][name]


def utc(at_s: float) -> datetime:
    return datetime.fromtimestamp(at_s, timezone.utc)


def settings(servicebus: str, queue: str) -> Settings:
    """The app's settings, as far as its publisher reads them."""
    return Settings(
        storage=StorageConnection("AzureWebJobsStorage", connection_string=CONNECTION_STRING),
        servicebus=ServiceBusConnection("ServiceBusConnection", connection_string=servicebus),
        trigger_queue=queue,
        publish_timeout_s=PUBLISH_TIMEOUT_S,
    )


@dataclass
class Received:
    event: TriggerEvent
    delivery_count: int  # as the Functions host reports it: 1 on the first delivery
    handle: Any  # the simulation's Delivery, or the SDK's message


class Receiver(ABC):
    """One instance's trigger listener: takes one message at a time and holds its lock while it runs."""

    @abstractmethod
    async def take(self, within_s: float) -> Received | None:
        """The next message, locked for this receiver, if one comes within `within_s`."""

    @abstractmethod
    async def complete(self, received: Received) -> None: ...

    @abstractmethod
    async def abandon(self, received: Received) -> None: ...

    @abstractmethod
    async def lose(self) -> None:
        """The instance dies: its locks are neither settled nor renewed again."""


class Bus(ABC):
    """The trigger queue, one of the two worlds."""

    lock_s: float  # how long a lost holder's message may stay locked
    publisher: Publisher

    @abstractmethod
    def now(self) -> float:
        """The service's wall clock."""

    async def wait(self, seconds: float) -> None:
        await asyncio.sleep(seconds)  # on the simulation's loop the clock jumps

    @abstractmethod
    async def receiver(self) -> Receiver:
        """A listener, attached and ready (its first wait is for a message, not for its link)."""

    @abstractmethod
    async def dead_letters(self) -> list[TriggerEvent]: ...

    @abstractmethod
    async def go_away(self) -> None:
        """The namespace becomes unreachable for the publisher."""

    @abstractmethod
    async def refuse_sends(self) -> None:
        """The namespace refuses the publisher's sends (its credentials no longer accepted) and goes on
        delivering to the receivers it has."""

    async def close(self) -> None:
        await self.publisher.close()


class SimReceiver(Receiver):
    def __init__(self, broker: simbus.Broker) -> None:
        self.broker = broker

    async def take(self, within_s: float) -> Received | None:
        try:
            delivery = await asyncio.wait_for(self.broker.take(self), within_s)
        except TimeoutError:
            return None
        return Received(TriggerEvent.decode(delivery.body), delivery.delivery_count, delivery)

    async def complete(self, received: Received) -> None:
        self.broker.complete(received.handle)

    async def abandon(self, received: Received) -> None:
        self.broker.abandon(received.handle)

    async def lose(self) -> None:
        self.broker.holder_lost(self)


class SimBus(Bus):
    lock_s = simbus.LOCK_S

    def __init__(self, loop: SimLoop) -> None:
        self.loop = loop
        self.away = False
        self.weather = simbus.BusWeather(down=lambda: self.away)
        self.broker = simbus.Broker(lambda: world_time(loop), random.Random(0), self.weather)
        self.publisher = simbus.SimPublisher(self.broker, PUBLISH_TIMEOUT_S, alive=lambda: True)

    def now(self) -> float:
        return world_time(self.loop)

    async def receiver(self) -> Receiver:
        return SimReceiver(self.broker)

    async def dead_letters(self) -> list[TriggerEvent]:
        return [TriggerEvent.decode(d.body) for d in self.broker.dead_letters()]

    async def go_away(self) -> None:
        self.away = True

    async def refuse_sends(self) -> None:
        self.weather.send_fault = lambda: "refused"


@dataclass
class RealReceiver(Receiver):
    """A peek-lock receiver without prefetch; it renews the locks it holds, as the Functions host does."""

    sdk: ServiceBusReceiver
    lock_s: float
    renewing: dict[int, asyncio.Task[None]] = field(default_factory=dict)

    async def take(self, within_s: float) -> Received | None:
        got = await self.sdk.receive_messages(max_message_count=1, max_wait_time=within_s)
        if not got:
            return None
        message = got[0]
        self.renewing[id(message)] = asyncio.create_task(self._renew(message))
        # The SDK reports the AMQP header's count (failed deliveries before this one); the host adds one.
        count = (message.delivery_count or 0) + 1
        return Received(TriggerEvent.decode(b"".join(message.body)), count, message)

    async def _renew(self, message: ServiceBusReceivedMessage) -> None:
        while True:
            await asyncio.sleep(self.lock_s / 3)
            await self.sdk.renew_message_lock(message)

    async def _stop_renewing(self, received: Received) -> None:
        task = self.renewing.pop(id(received.handle))
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def complete(self, received: Received) -> None:
        await self._stop_renewing(received)
        await self.sdk.complete_message(received.handle)

    async def abandon(self, received: Received) -> None:
        await self._stop_renewing(received)
        await self.sdk.abandon_message(received.handle)

    async def lose(self) -> None:
        for task in self.renewing.values():
            task.cancel()
        await asyncio.gather(*self.renewing.values(), return_exceptions=True)
        self.renewing.clear()
        await self.sdk.close()  # unsettled: the broker keeps each lock until it expires


class RealBus(Bus):
    def __init__(self, servicebus: str, queue: str, lock_s: float) -> None:
        self.servicebus, self.queue, self.lock_s = servicebus, queue, lock_s
        self.client = ServiceBusClient.from_connection_string(servicebus)
        self.publisher = ServiceBusPublisher(settings(servicebus, queue))
        self.receivers: list[RealReceiver] = []

    def now(self) -> float:
        return time.time()

    async def receiver(self) -> Receiver:
        sdk = self.client.get_queue_receiver(self.queue, prefetch_count=0)
        await sdk.__aenter__()  # opens the link: a first receive would spend its wait on that
        self.receivers.append(RealReceiver(sdk, self.lock_s))
        return self.receivers[-1]

    async def dead_letters(self) -> list[TriggerEvent]:
        async with self.client.get_queue_receiver(self.queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            peeked = await dlq.peek_messages(max_message_count=32)
        return [TriggerEvent.decode(b"".join(m.body)) for m in peeked]

    async def go_away(self) -> None:
        await self.publisher.close()
        nobody = connection_string(free_port())  # nothing listens there
        self.publisher = ServiceBusPublisher(settings(nobody, self.queue))

    async def refuse_sends(self) -> None:
        await self.publisher.close()
        key = self.servicebus.split("SharedAccessKey=")[1].split(";")[0]
        refused = self.servicebus.replace(f"SharedAccessKey={key};", "SharedAccessKey=not-the-key;")
        self.publisher = ServiceBusPublisher(settings(refused, self.queue))

    async def close(self) -> None:
        # Side by side: the SDK spends most of a second closing each link.
        await asyncio.gather(*(r.lose() for r in self.receivers), super().close())
        await self.client.close()


Scenario = Callable[[Bus], Awaitable[None]]
Run = Callable[[Scenario], None]


def run_simulated(scenario: Scenario) -> None:
    """`scenario` against `sim.bus` on the simulation's loop: its waits take no wall time."""
    loop = SimLoop()
    try:
        loop.run_until_complete(_run(SimBus(loop), scenario))
    finally:
        loop.close()


async def _run(bus: Bus, scenario: Scenario) -> None:
    try:
        await scenario(bus)
    finally:
        await bus.close()


class Background:
    """The asyncio loop, in a thread, that the real-side scenarios run on one after another. Each leaves its
    clients' closing (the SDK spends most of a second detaching each link) to finish there while the next runs."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="bus conformance", daemon=True)
        self.thread.start()
        self.closing: list[asyncio.Task[None]] = []  # touched on the loop's thread only

    def run(self, bus: Callable[[], Bus], scenario: Scenario) -> None:
        started = time.monotonic()
        asyncio.run_coroutine_threadsafe(self._run(bus(), scenario), self.loop).result(timeout=120)
        log.info("real scenario took %.1f s of wall time", time.monotonic() - started)

    async def _run(self, bus: Bus, scenario: Scenario) -> None:
        try:
            await scenario(bus)
        finally:
            self.closing.append(asyncio.create_task(bus.close()))

    async def _closed(self) -> None:
        await asyncio.gather(*self.closing)

    def stop(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self._closed(), self.loop).result(timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=30)
            self.loop.close()
