"""The simulated Service Bus held to the real one: each test runs against `sim.bus` (on the simulation's
virtual-time loop, as `sim.world` runs it) and against the project's Service Bus stand-in. On the real side
the app's own `ServiceBusPublisher` publishes (the port `sim.bus.SimPublisher` stands in for) and the
`azure-servicebus` SDK receives as the Functions host's trigger does (peek-lock, one message at a time, no
prefetch, the lock renewed while the function runs). The tests assert what the app relies on, failure
answers included, as the app sees them: after the publisher's translation into `TriggerUnavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from typing import Any

import pytest
from azure.servicebus import ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver

from devstack.broker import broker, connection_string, write_config
from devstack.procs import ServiceStartError, free_port
from shared.bus.publisher import Publisher, ServiceBusPublisher
from shared.core.errors import TriggerUnavailable
from shared.core.events import Reason, TriggerEvent
from shared.core.settings import ServiceBusConnection, Settings, StorageConnection
from sim import bus as simbus
from sim.account import CONNECTION_STRING
from sim.clock import world_time
from sim.loop import SimLoop
from tests.conftest import Names, unavailable
from tests.fixtures_servicebus import SAMPLE_CONFIG, ServiceBus

log = logging.getLogger(__name__)

WAIT_S = 5.0  # how long a receiver waits for a message that must come (it returns as soon as one does)
QUIET_S = 0.5  # how long a receiver waits for a message that must not come
SCHEDULE_S = 1.5  # how far ahead a scheduled message is due
CLOCK_SLACK_S = 0.05  # the broker keeps times in milliseconds
SHORT_LOCK_S = 2  # the lock duration of the stand-in queue the lock-expiry test uses
SHORT_LOCK_QUEUE = "conformance-short-lock"
PUBLISH_TIMEOUT_S = 3.0  # as the simulation's scenarios set it
EVENT = TriggerEvent("devacct", "work-items", Reason.SUBMITTED, payload_size=3, batch_id="b-1", slot=2, token="t")


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


@pytest.fixture(scope="module")
def background() -> Iterator[Background]:
    running = Background()
    yield running
    running.stop()


def _runner(request: pytest.FixtureRequest, real: Callable[[], Callable[[], Bus]]) -> Run:
    """A scenario's runner for this parameter: the simulation, or the stand-in (`real` resolves its fixtures
    here, on the test's thread, and returns how to build the bus on the background loop)."""
    if request.param == "sim":
        return run_simulated
    background: Background = request.getfixturevalue("background")
    return partial(background.run, real())


@pytest.fixture(params=["sim", "real"])
def bus(request: pytest.FixtureRequest, names: Names) -> Run:
    """The app's trigger queue (MaxDeliveryCount 10, a one-minute lock): a fresh queue per test on the real side."""

    def real() -> Callable[[], Bus]:
        service: ServiceBus = request.getfixturevalue("servicebus_service")
        return partial(RealBus, service.connection_string, names.queue("trigger"), simbus.LOCK_S)

    return _runner(request, real)


@pytest.fixture(scope="module")
def short_lock_servicebus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A stand-in whose queue locks for SHORT_LOCK_S (the session's locks for a minute, the trigger queue's)."""
    root = tmp_path_factory.mktemp("servicebus-short-lock")
    config = write_config(root / "config.json", {SHORT_LOCK_QUEUE: {"LockDuration": f"PT{SHORT_LOCK_S}S"}})
    port = free_port()
    try:
        process = broker(config, port, root / "servicebus.log").start(timeout_s=30)
    except ServiceStartError as e:
        unavailable("Service Bus stand-in", e)
        raise
    try:
        yield connection_string(port)
    finally:
        process.stop()


@pytest.fixture(params=["sim", "real"])
def short_lock_bus(request: pytest.FixtureRequest) -> Run:
    def real() -> Callable[[], Bus]:
        servicebus: str = request.getfixturevalue("short_lock_servicebus")
        return partial(RealBus, servicebus, SHORT_LOCK_QUEUE, SHORT_LOCK_S)

    return _runner(request, real)


def test_an_immediate_publish_is_delivered_once_as_the_event_it_was(bus: Run) -> None:
    async def scenario(b: Bus) -> None:
        assert await b.publisher.publish(EVENT) is None
        first, second = await asyncio.gather(b.receiver(), b.receiver())
        got = await first.take(WAIT_S)
        assert got is not None
        assert (got.event, got.delivery_count) == (EVENT, 1)
        await first.complete(got)
        assert list(await asyncio.gather(first.take(QUIET_S), second.take(QUIET_S))) == [None, None]

    bus(scenario)


def test_a_scheduled_publish_arrives_at_its_time_and_not_before(bus: Run) -> None:
    async def scenario(b: Bus) -> None:
        at_s = b.now() + SCHEDULE_S
        number = await b.publisher.publish(EVENT, at=utc(at_s))
        assert isinstance(number, int)
        receiver = await b.receiver()
        early_s = at_s - b.now() - 0.3  # what is left before its time (none when setting up took longer)
        if early_s > 0:
            assert await receiver.take(early_s) is None
        got = await receiver.take(max(0.0, at_s - b.now()) + WAIT_S)
        assert got is not None
        assert b.now() >= at_s - CLOCK_SLACK_S, "never before its time, however slow the set-up"
        assert (got.event, got.delivery_count) == (EVENT, 1)
        await receiver.complete(got)

    bus(scenario)


@pytest.mark.slow
def test_a_scheduled_message_cancelled_in_time_never_arrives_and_a_second_cancel_is_refused(bus: Run) -> None:
    async def scenario(b: Bus) -> None:
        at_s = b.now() + SCHEDULE_S
        kept_event = TriggerEvent("devacct", "work-items", Reason.LOOK, token="kept")
        cancelled = await b.publisher.publish(EVENT, at=utc(at_s))
        kept = await b.publisher.publish(kept_event, at=utc(at_s))
        assert cancelled is not None
        assert kept not in (None, cancelled)
        await b.publisher.cancel(cancelled)
        receiver = await b.receiver()
        got = await receiver.take(at_s - b.now() + WAIT_S)
        assert got is not None
        assert got.event == kept_event
        await receiver.complete(got)
        assert await receiver.take(QUIET_S) is None
        for number in (cancelled, kept):  # cancelled already; delivered and completed
            with pytest.raises(TriggerUnavailable, match="MessageNotFound"):
                await b.publisher.cancel(number)

    bus(scenario)


@pytest.mark.slow
def test_cancelling_a_message_already_enqueued_is_refused_and_it_is_still_delivered(bus: Run) -> None:
    async def scenario(b: Bus) -> None:
        due = await b.publisher.publish(EVENT, at=utc(b.now() + 1.0))
        past_event = TriggerEvent("devacct", "work-items", Reason.RETRY_DUE)
        past = await b.publisher.publish(past_event, at=utc(b.now() - 60))  # enqueued at once, as a plain send
        assert due is not None
        assert past is not None
        with pytest.raises(TriggerUnavailable, match="MessageNotFound"):
            await b.publisher.cancel(past)
        await b.wait(1.5)
        with pytest.raises(TriggerUnavailable, match="MessageNotFound"):
            await b.publisher.cancel(due)
        with pytest.raises(TriggerUnavailable, match="MessageNotFound"):
            await b.publisher.cancel(max(due, past) + 1000)  # a number never issued
        receiver = await b.receiver()
        events = []
        for _ in range(2):
            got = await receiver.take(WAIT_S)
            assert got is not None
            events.append(got.event)
            await receiver.complete(got)
        assert set(events) == {past_event, EVENT}

    bus(scenario)


@pytest.mark.slow
def test_a_locked_message_goes_to_no_second_receiver_and_abandon_returns_it_counted(bus: Run) -> None:
    async def scenario(b: Bus) -> None:
        await b.publisher.publish(EVENT)
        first, second = await asyncio.gather(b.receiver(), b.receiver())
        got = await first.take(WAIT_S)
        assert got is not None
        assert got.delivery_count == 1
        assert await second.take(QUIET_S) is None
        await first.abandon(got)
        again = await second.take(WAIT_S)
        assert again is not None
        assert (again.event, again.delivery_count) == (EVENT, 2)
        await second.complete(again)
        assert await first.take(QUIET_S) is None

    bus(scenario)


@pytest.mark.slow
def test_a_renewed_lock_holds_past_its_duration_and_expires_once_its_holder_is_lost(short_lock_bus: Run) -> None:
    async def scenario(b: Bus) -> None:
        await b.publisher.publish(EVENT)
        holder, other = await asyncio.gather(b.receiver(), b.receiver())
        got = await holder.take(WAIT_S)
        assert got is not None
        assert got.delivery_count == 1
        assert await other.take(b.lock_s * 1.25) is None  # past its duration: the holder renews it
        await holder.lose()
        again = await other.take(b.lock_s + WAIT_S)
        assert again is not None
        assert (again.event, again.delivery_count) == (EVENT, 2)
        await other.complete(again)

    short_lock_bus(scenario)


@pytest.mark.slow
def test_a_message_abandoned_max_delivery_count_times_is_dead_lettered(bus: Run) -> None:
    limit = trigger_queue_property("MaxDeliveryCount")
    assert simbus.MAX_DELIVERY_COUNT == limit == 10

    async def scenario(b: Bus) -> None:
        await b.publisher.publish(EVENT)
        receiver = await b.receiver()
        for count in range(1, limit + 1):
            got = await receiver.take(WAIT_S)
            assert got is not None
            assert (got.event, got.delivery_count) == (EVENT, count)
            await receiver.abandon(got)
        assert await b.dead_letters() == [EVENT]
        assert await receiver.take(QUIET_S) is None

    bus(scenario)


def test_with_the_namespace_away_publishing_fails_within_the_publish_timeout(bus: Run) -> None:
    async def scenario(b: Bus) -> None:
        await b.go_away()
        attempts: list[Callable[[], Awaitable[object]]] = [
            lambda: b.publisher.publish(EVENT),
            lambda: b.publisher.publish(EVENT, at=utc(b.now() + 60)),
            lambda: b.publisher.cancel(1),
        ]
        for attempt in attempts:
            started = b.now()
            with pytest.raises(TriggerUnavailable):
                await attempt()
            assert b.now() - started <= PUBLISH_TIMEOUT_S + 1.0  # the publisher closes its failed link

    bus(scenario)


@pytest.mark.slow  # the real side waits out two refused publishes
def test_sends_refused_fail_within_the_publish_timeout_while_deliveries_go_on(bus: Run) -> None:
    async def scenario(b: Bus) -> None:
        receiver = await b.receiver()
        await b.publisher.publish(EVENT)
        await b.refuse_sends()
        for attempt in (lambda: b.publisher.publish(EVENT), lambda: b.publisher.publish(EVENT, at=utc(b.now() + 60))):
            started = b.now()
            with pytest.raises(TriggerUnavailable):
                await attempt()
            assert b.now() - started <= PUBLISH_TIMEOUT_S + 1.0
        got = await receiver.take(WAIT_S)  # what was sent before is still delivered
        assert got is not None
        assert (got.event, got.delivery_count) == (EVENT, 1)
        await receiver.complete(got)
        assert await receiver.take(QUIET_S) is None  # and nothing of what was refused

    bus(scenario)
