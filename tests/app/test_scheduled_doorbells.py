"""Every doorbell of a batch with a not_before rings at its start (issue 36 item 6), on the real broker: the
first submit's, a keyed retry's, and a doorbell deferred while Service Bus was away and rung once it answered.
A doorbell rung at once finds only hidden chunks, and at the start none comes."""

from __future__ import annotations

import asyncio
import math
import time
from datetime import datetime, timedelta, timezone

import pytest
from azure.servicebus.aio import ServiceBusClient

from shared.batch.lifecycle import Options
from shared.bus.publisher import ServiceBusPublisher
from shared.core.events import Reason, TriggerEvent
from shared.core.settings import Settings
from shared.intake.submit import submit
from shared.router import route
from shared.services import Services
from tests.app.conftest import RecordingPublisher, app_environment, wait_for

RECORD = "tests.app.handlers:record"
BODY = b'{"items":[{"id":"s-1","amount":"1.00","currency":"EUR","author":"a","distributor":"d"}]}'


async def scheduled_doorbells(connection: str, services: Services) -> list[datetime | None]:
    """When each `submitted` event on the trigger queue comes due (None: it is there now)."""
    async with ServiceBusClient.from_connection_string(connection) as client:
        async with client.get_queue_receiver(services.settings.trigger_queue) as receiver:
            peeked = await receiver.peek_messages(max_message_count=50)
    return [
        m.scheduled_enqueue_time_utc for m in peeked if TriggerEvent.decode(b"".join(m.body)).reason is Reason.SUBMITTED
    ]


def all_at_start(doorbells: list[datetime | None], start: datetime) -> bool:
    return all(at is not None and at >= start - timedelta(seconds=1) for at in doorbells)


async def keyed_submit(services: Services, start: datetime, key: str | None = "k-1") -> str:
    done = await submit(
        services, BODY, content_type="application/json", content_encoding=None, idempotency_key=key,
        options=Options(not_before=start),
    )  # fmt: skip
    return done.trigger


@pytest.mark.slow
async def test_a_keyed_retry_of_a_scheduled_batch_rings_at_its_start_not_at_once(configure, servicebus_service):
    services = configure(servicebus=servicebus_service.connection_string)
    start = datetime.now(timezone.utc) + timedelta(minutes=10)

    assert await keyed_submit(services, start) == "published"
    assert await keyed_submit(services, start) == "published", "the retry answers the same batch and rings again"

    doorbells = await scheduled_doorbells(servicebus_service.connection_string, services)
    assert len(doorbells) == 2, "the first submit's doorbell and the retry's"
    assert all_at_start(doorbells, start), f"every doorbell comes due at the batch's start {start}: {doorbells}"


@pytest.mark.slow
async def test_a_deferred_doorbell_of_a_scheduled_batch_rings_at_its_start_once_service_bus_answers(
    configure, servicebus_service, storage_connection_string, names
):
    services = configure()  # the broker is unreachable: the doorbell is deferred
    start = datetime.now(timezone.utc) + timedelta(minutes=10)
    assert await keyed_submit(services, start, key=None) == "deferred"

    # Service Bus answers again: this process's retry rings the doorbell on the real broker.
    reachable = app_environment(storage_connection_string, servicebus_service.connection_string, names)
    services.publisher = ServiceBusPublisher(Settings.from_env(reachable))

    async def rung() -> bool:
        return services.deferred.pending() == []

    await wait_for(rung, 60, "the deferred doorbell to be rung")

    doorbells = await scheduled_doorbells(servicebus_service.connection_string, services)
    assert len(doorbells) == 1
    assert all_at_start(doorbells, start), f"the deferred doorbell comes due at the batch's start {start}: {doorbells}"


@pytest.mark.slow
async def test_a_scheduled_doorbell_comes_when_its_chunks_are_visible_not_before(configure):
    """A batch's chunks are hidden for whole seconds counted before they are stored, so with a not_before on a
    whole second they become visible up to a second after it; a doorbell at the not_before itself found nothing
    and the batch waited for its queue's next look (minutes once the chain had backed off: the simulation's
    progress bound, `schedule` seed 3). Submitted late in a second, the doorbell served when it comes due finds
    the batch's chunks visible and handles them."""
    services = configure(publisher=RecordingPublisher(), HANDLER=RECORD)
    # late in a second: its chunks' hiding outlasts the start by most of a second
    await asyncio.sleep(max(0.0, 0.6 - time.time() % 1))
    start = datetime.fromtimestamp(math.floor(time.time()) + 3, timezone.utc)
    await submit(
        services, BODY, content_type="application/json", content_encoding=None, idempotency_key=None,
        options=Options(not_before=start),
    )  # fmt: skip
    [(doorbell, at)] = [(e, at) for e, at in services.publisher.events if e.reason is Reason.SUBMITTED]
    assert at is not None
    assert at >= start

    await asyncio.sleep(max(0.0, at.timestamp() - time.time()))  # it comes due
    report = await route(services, doorbell)
    assert report.items_ok == 1, f"the doorbell due at {at} found its batch's chunks hidden: {report}"
