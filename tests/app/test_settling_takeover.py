"""A drainer whose message was received again elsewhere (its visibility ran out) leaves it to the new holder:
the service answers its stale pop receipt with 400 PopReceiptMismatch, which the app names and settles on, as
the simulator found (RELIABILITY.md, "The simulation")."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from azure.storage.queue.aio import QueueClient

from shared.core.errors import PopReceiptMismatch
from shared.engine.report import DrainReport
from shared.engine.settling import Settler
from shared.engine.wakeups import Wakeups
from shared.services import Services
from shared.store.received import Received
from shared.store.result_store import ResultWriter
from shared.store.storage import translated


def settler_for(services: Services, queue: QueueClient) -> Settler:
    settings = services.settings
    report = DrainReport(queue.queue_name, 0, "test")
    return Settler(
        settings,
        queue.queue_name,
        services.storage.queue(queue.queue_name + "-poison"),
        batches=services.storage.container(settings.batches_container),
        state=services.storage.container(settings.state_container),
        results=ResultWriter(services.storage.container(settings.results_container)),
        report=report,
        wakeups=Wakeups(services, queue.queue_name, 0, report, time.monotonic),
    )


async def received_twice(services: Services) -> tuple[QueueClient, Received, Received]:
    """One message, received by a first drainer whose visibility runs out, then by a second."""
    queue = await services.storage.ensure_queue(services.settings.work_queue)
    await queue.send_message("a chunk")
    first = [m async for m in queue.receive_messages(visibility_timeout=1)]
    await asyncio.sleep(1.5)
    second = [m async for m in queue.receive_messages(visibility_timeout=30)]
    assert [m.id for m in first] == [m.id for m in second]
    now = time.monotonic()
    return queue, Received(first[0], queue, now), Received(second[0], queue, now)


@pytest.mark.slow
async def test_a_stale_pop_receipt_is_named_as_such(configure):
    services = configure()
    queue, stale, _ = await received_twice(services)
    with pytest.raises(PopReceiptMismatch) as answer:
        async with translated("delete message"):
            await queue.delete_message(stale.message, pop_receipt=stale.pop_receipt)
    assert answer.value.status == 400


@pytest.mark.slow
async def test_a_message_received_again_elsewhere_is_left_to_its_new_holder(configure, caplog):
    services = configure()
    queue, stale, current = await received_twice(services)
    settler = settler_for(services, queue)

    with caplog.at_level(logging.WARNING, logger="shared.engine.drainer"):
        await settler.delete(stale)
        updated = await settler.update(stale, "rewritten", 5)

    assert updated is False
    assert sum("taken over" in r.getMessage() for r in caplog.records) == 2
    peeked = await queue.peek_messages()
    assert peeked == [], "the new holder's message stays hidden, untouched"
    await queue.delete_message(current.message, pop_receipt=current.pop_receipt)
    assert [m async for m in queue.receive_messages()] == []
