"""The cancel bound (issue 36 items 4 and 8), with the engine in-process on the real Azurite: no handler call of a
batch starts later than ENDED_CHECK_S after its cancel's answer, for a sync handler whose chunks wait for a
thread, and when the listing of the ended markers is slow.

The cancel comes from another instance (its own memory of ended batches), so the drainer learns of it only by
listing the markers, as a drainer on another host does.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from shared.batch.lifecycle import ENDED_CHECK_S
from shared.batch.verdicts import EndedBatches
from shared.ops import lifecycle
from shared.ops.reports import read_batch_status
from shared.services import Services
from shared.store import ended
from tests.app import handlers
from tests.app.conftest import another_instance, drain_all, wait_for
from tests.app.sales import submit_ids


def elsewhere(services: Services) -> Services:
    """Another instance, which knows nothing of what this one ended."""
    return replace(another_instance(services), ended=EndedBatches(ENDED_CHECK_S))


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_sync_handler_starts_no_call_of_a_cancelled_batch_past_the_bound_while_its_chunks_wait(configure):
    """120 one-item chunks, 16 admitted at once, a 1 s sync handler; the loop's default executor has 2 threads (it
    has a few per CPU: 6 on two CPUs, which a longer handler exhausts the same way)."""
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(2))
    services = configure(HANDLER="tests.app.handlers:slow_sync", CHUNK_MAX_ITEMS="1", CHUNK_CONCURRENCY="16")
    batch_id = await submit_ids(services, [f"s-{i}" for i in range(120)])
    drain = asyncio.ensure_future(drain_all(services))

    async def begun() -> bool:
        return len(handlers.started_at) >= 2

    await wait_for(begun, 60, "the first handler calls")
    await lifecycle.cancel(elsewhere(services), batch_id)
    answered = time.time()
    await asyncio.wait_for(drain, 90)

    latest = max(started for _, started in handlers.started_at)
    assert latest <= answered + ENDED_CHECK_S, f"a call began {latest - answered:.1f} s after the cancel's answer"
    status = await read_batch_status(services, batch_id)
    assert status["status"] == "cancelled"
    assert status["items"]["succeeded"] == len(handlers.started_at)
    assert status["items"]["cancelled"] == 120 - len(handlers.started_at) > 0


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_listing_of_the_ended_markers_slower_than_the_bound_is_not_taken_as_fresh(configure, monkeypatch):
    """Every listing answers ENDED_CHECK_S + 0.5 s after it began (an SDK retrying); the cancel lands while the
    second one is under way, after it read the markers. Knowledge from a listing that answered past the bound
    is stale: the drainer lists again, sees the cancel, and calls no handler."""
    services = configure(HANDLER="tests.app.handlers:record", CHUNK_MAX_ITEMS="5")
    batch_id = await submit_ids(services, [f"l-{i}" for i in range(5)])
    real, count = ended.listed, 0
    second_read, cancelled = asyncio.Event(), asyncio.Event()

    async def slow(state, **since):  # type: ignore[no-untyped-def]
        nonlocal count
        count += 1
        began = time.monotonic()
        found = await real(state, **since)
        if count == 2:
            second_read.set()
            await cancelled.wait()
        if count <= 2:
            await asyncio.sleep(max(0.0, began + ENDED_CHECK_S + 0.5 - time.monotonic()))
        return found

    monkeypatch.setattr(ended, "listed", slow)
    drain = asyncio.ensure_future(drain_all(services))
    await asyncio.wait_for(second_read.wait(), 60)
    await lifecycle.cancel(elsewhere(services), batch_id)
    cancelled.set()
    await asyncio.wait_for(drain, 60)

    assert not handlers.calls, "no handler call started on knowledge older than the bound"
    status = await read_batch_status(services, batch_id)
    assert (status["status"], status["items"]["cancelled"]) == ("cancelled", 5)
