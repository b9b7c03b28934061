"""A drain session stops starting handler calls once its budget is spent or its lease's renewal fails, on the real
Azurite.

A session receives a page of chunks and works through it a place at a time; with a slow handler the page can
outlast the budget by many calls (platform seed 40 of the simulation: 89 s against a bound of 70 s, with a
10 s budget, 32 chunks a page and 0.5-2 s calls), and outlast its lease: platform seed 77 had a session whose
lease renewals failed under slow storage go on starting calls after the lease lapsed, beside the next holder's,
two handler calls at once with HANDLER_MAX_IN_FLIGHT=1 (the handler limits count a session's calls under its
lease). Then the chunks the session still holds are put back, visible at once and no attempt counted, for the
next session. In the budget's test the session's clock is the test's: the first call spends the budget,
whatever the machine's speed; in the lease's, the first call lasts until a renewal has failed. A session that
stops in time and holding its lease with work left (an express page came back full) says so, not `lease-lost`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from azure.core.exceptions import ServiceRequestError
from azure.storage.blob.aio import BlobLeaseClient
from azure.storage.queue.aio import QueueClient

from shared.engine.drainer import Drainer
from shared.handlers import ChunkContext
from shared.ops import lifecycle
from shared.ops.reports import read_batch_status
from tests.app import handlers
from tests.app.conftest import RecordingPublisher, drain_all
from tests.app.sales import submit_ids
from tests.app.test_lanes import submit_to

BUDGET_S = 60.0


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_session_whose_budget_a_slow_call_spent_starts_no_other_call_and_leaves_its_page_to_the_next(
    configure,
):
    publisher = RecordingPublisher()
    services = configure(
        publisher=publisher, HANDLER="tests.app.handlers:record", CHUNK_MAX_ITEMS="5", CHUNK_CONCURRENCY="1"
    )
    batch_id = await submit_ids(services, [f"b-{i}" for i in range(50)])  # 10 chunks, one page
    clock = Clock()
    started: list[int] = []

    async def slow(context: ChunkContext) -> None:
        started.append(context.chunk)
        if len(started) == 1:
            clock.now += BUDGET_S + 1  # this call outlasts the session's budget

    handlers.on_chunk.append(slow)

    spent = await Drainer(services, services.settings.work_queue, budget_s=BUDGET_S, clock=clock).run()

    assert spent.messages == 10, "the session held the whole page"
    assert len(started) == 1, f"calls started past the budget: chunks {started}"
    assert spent.outcome == "budget"
    assert publisher.reasons().count("continue") == 1
    work = services.storage.queue(services.settings.work_queue)
    visible = await work.peek_messages(max_messages=32)
    assert len(visible) == 9, "the chunks it held are visible again at once"

    handlers.on_chunk.clear()
    await drain_all(services)
    status = await read_batch_status(services, batch_id)
    assert status["status"] == "completed"
    assert Counter(handlers.calls.values()) == Counter({1: 50}), "every item handled once"
    assert set(handlers.attempts_seen) == {1}, "a chunk put back for the budget counts no attempt"


async def test_a_session_past_its_budget_puts_back_the_chunks_it_holds_of_a_cancelled_batch_unsettled(
    configure, monkeypatch
):
    """No handler call starts for a cancelled batch's chunk, yet discarding one is storage work (its record, its
    delete): the simulation's lifecycle seed 734 had a page of a cancelled batch's chunks, one place, each discard's
    delete retried by the SDK for 16 s in an outage of deletes, one after another, four of them after the budget: a
    session of 78 s for a budget of 10 s. Past the budget, a chunk that gets its place goes back for the next
    session instead, as any other chunk of the page does. Here the first chunk's delete spends the budget."""
    publisher = RecordingPublisher()
    services = configure(
        publisher=publisher, HANDLER="tests.app.handlers:record", CHUNK_MAX_ITEMS="5", CHUNK_CONCURRENCY="1"
    )
    batch_id = await submit_ids(services, [f"c-{i}" for i in range(50)])  # 10 chunks, one page
    await lifecycle.cancel(services, batch_id)
    clock = Clock()
    deleted: list[str] = []
    delete = QueueClient.delete_message

    async def slow_delete(self: QueueClient, message: Any, *args: Any, **kwargs: Any) -> Any:
        deleted.append(str(getattr(message, "id", message)))
        if len(deleted) == 1:
            clock.now += BUDGET_S + 1  # storage answers this delete late: the budget is spent
        return await delete(self, message, *args, **kwargs)

    monkeypatch.setattr(QueueClient, "delete_message", slow_delete)

    spent = await Drainer(services, services.settings.work_queue, budget_s=BUDGET_S, clock=clock).run()

    assert spent.messages == 10, "the session held the whole page"
    assert len(deleted) == 1, f"chunks settled past the budget: {len(deleted) - 1}"
    assert (spent.outcome, spent.discarded) == ("budget", 5)
    assert publisher.reasons().count("continue") == 1
    work = services.storage.queue(services.settings.work_queue)
    assert len(await work.peek_messages(max_messages=32)) == 9, "the chunks it held are visible again at once"

    monkeypatch.undo()
    await drain_all(services)
    status = await read_batch_status(services, batch_id)
    assert status["status"] == "cancelled"
    assert status["items"]["cancelled"] == 50
    assert handlers.calls == {}, "no handler call for a cancelled batch"


@pytest.mark.slow
async def test_a_session_whose_lease_renewal_failed_starts_no_other_call_and_leaves_its_page_to_the_next(
    configure, monkeypatch
):
    publisher = RecordingPublisher()
    services = configure(
        publisher=publisher,
        HANDLER="tests.app.handlers:record",
        CHUNK_MAX_ITEMS="5",
        CHUNK_CONCURRENCY="1",
        HANDLER_MAX_IN_FLIGHT="1",
        LEASE_S="15",
    )
    batch_id = await submit_ids(services, [f"l-{i}" for i in range(50)])  # 10 chunks, one page
    renewal_failed = asyncio.Event()

    async def failing_renew(self: BlobLeaseClient, **kwargs: Any) -> Any:
        renewal_failed.set()
        raise ServiceRequestError("storage did not answer (test)")

    monkeypatch.setattr(BlobLeaseClient, "renew", failing_renew)
    started: list[int] = []

    async def slow(context: ChunkContext) -> None:
        started.append(context.chunk)
        if len(started) == 1:
            await renewal_failed.wait()  # this call outlasts a renewal, which fails: the lease may lapse under it

    handlers.on_chunk.append(slow)

    spent = await Drainer(services, services.settings.work_queue).run()

    assert spent.messages == 10, "the session held the whole page"
    assert len(started) == 1, f"calls started after the lease's renewal failed: chunks {started}"
    assert spent.outcome == "lease-lost"
    work = services.storage.queue(services.settings.work_queue)
    assert len(await work.peek_messages(max_messages=32)) == 9, "the chunks it held are visible again at once"

    handlers.on_chunk.clear()
    monkeypatch.undo()
    await drain_all(services)
    assert (await read_batch_status(services, batch_id))["status"] == "completed"
    assert Counter(handlers.calls.values()) == Counter({1: 50}), "every item handled once"
    assert set(handlers.attempts_seen) == {1}, "a chunk put back for a lost lease counts no attempt"


async def test_a_session_that_stops_in_time_and_holding_its_lease_with_work_left_says_work_left(configure) -> None:
    """An express page that came back full leaves its lane maybe holding more: the session ends with a `continue`,
    its outcome `work-left` (it said `lease-lost`, though the lease was held to the end and time was left)."""
    publisher = RecordingPublisher()
    services = configure(
        publisher=publisher, HANDLER="tests.app.handlers:record", CHUNK_MAX_ITEMS="1", CHUNK_CONCURRENCY="3",
        RECEIVERS="1", RECEIVE_BATCH="2",
    )  # fmt: skip
    first = await submit_to(services, "a", 2, tenant="acme")  # the receiver's page: 2 of 2
    page_held, release, newcomer = asyncio.Event(), asyncio.Event(), asyncio.Event()
    held: list[int] = []

    async def hook(context: ChunkContext) -> None:
        if context.batch_id == first:
            held.append(context.chunk)
            if len(held) == 2:
                page_held.set()
            await release.wait()  # the receiver's page stays in the handler: only an express page takes more
        else:
            newcomer.set()

    handlers.on_chunk.append(hook)
    drain = asyncio.create_task(Drainer(services, services.settings.work_queue).run())
    try:
        await asyncio.wait_for(page_held.wait(), 30)
        await submit_to(services, "b", 2, tenant="bolt")  # a whole page: the express page comes back full
        await asyncio.wait_for(newcomer.wait(), 30)
    finally:
        release.set()
        spent = await drain

    assert spent.chunks_done == 4
    assert spent.outcome == "work-left"
    assert publisher.reasons().count("continue") == 1
