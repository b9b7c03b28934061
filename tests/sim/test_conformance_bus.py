"""The simulated Service Bus held to the real one: each test runs against `sim.bus` (on the simulation's
virtual-time loop, as `sim.world` runs it) and against the project's Service Bus stand-in. On the real side
the app's own `ServiceBusPublisher` publishes (the port `sim.bus.SimPublisher` stands in for) and the
`azure-servicebus` SDK receives as the Functions host's trigger does (peek-lock, one message at a time, no
prefetch, the lock renewed while the function runs). The tests assert what the app relies on, failure
answers included, as the app sees them: after the publisher's translation into `TriggerUnavailable`.
The two sides and how a scenario runs on each are in tests/sim/bus_sides.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from functools import partial

import pytest

from devstack.broker import broker, connection_string, write_config
from devstack.procs import ServiceStartError, free_port
from shared.core.errors import TriggerUnavailable
from shared.core.events import Reason, TriggerEvent
from sim import bus as simbus
from tests.conftest import Names, unavailable
from tests.fixtures_servicebus import ServiceBus
from tests.sim.bus_sides import (
    PUBLISH_TIMEOUT_S,
    Background,
    Bus,
    RealBus,
    Run,
    run_simulated,
    trigger_queue_property,
    utc,
)

WAIT_S = 5.0  # how long a receiver waits for a message that must come (it returns as soon as one does)
QUIET_S = 0.5  # how long a receiver waits for a message that must not come
SCHEDULE_S = 1.5  # how far ahead a scheduled message is due
CLOCK_SLACK_S = 0.05  # the broker keeps times in milliseconds
SHORT_LOCK_S = 2  # the lock duration of the stand-in queue the lock-expiry test uses
SHORT_LOCK_QUEUE = "conformance-short-lock"

EVENT = TriggerEvent("devacct", "work-items", Reason.SUBMITTED, payload_size=3, batch_id="b-1", slot=2, token="t")


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
