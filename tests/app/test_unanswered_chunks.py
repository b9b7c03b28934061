"""A chunk whose handler call never returns at any delivery is parked, not delivered forever (real Azurite).

A handler call that hangs until the function's timeout ends its process records nothing: the chunk's message
comes back after its visibility timeout, its dequeue count one higher. Before, a chunk hanging at every delivery
climbed past MAX_DEQUEUE_COUNT and was handed to the handler again each visibility timeout, forever, its batch
never final (the simulation's limits and replay families). A delivery past the one after the last attempt (every
delivery counts an attempt, one that failed before the handler too: the one after the last still calls it, as
before) whose lineage has no record now calls no handler: its items are parked failed ("no outcome after N
deliveries"), its batch becomes final, and the parked chunk is replayed like any other. A lineage a delivery did
record (its delete lost, c67e0de) is still finished by that record, even past that threshold.
"""

from __future__ import annotations

from typing import Any

import pytest

from shared.batch import poison
from shared.batch.settlement import NO_OUTCOME
from shared.handlers import ItemOutcome
from shared.ops.reports import read_batch_status
from shared.services import Services
from tests.app import handlers
from tests.app.conftest import drain_all, http_request
from tests.app.held import hold_first_chunk
from tests.app.parked import call, post_replay
from tests.app.sales import submit_ids
from tests.app.test_recorded_outcomes import export, first_delivery, record_then_die, until_visible


async def hang(services: Services, deliveries: int, chunk: int = 0) -> None:
    """`deliveries` deliveries of chunk `chunk` whose handler call never returned: each received, nothing
    recorded, its message neither updated nor deleted (the function's timeout ended the process)."""
    for _ in range(deliveries):
        await until_visible(services, 1)
        await first_delivery(services, chunk)


async def parked_texts(services: Services) -> list[poison.PoisonMessage]:
    queue = services.storage.queue(services.settings.poison_queue(services.settings.work_queue))
    return [poison.decode(str(m.content)) for m in await queue.peek_messages(max_messages=32)]


@pytest.mark.timeout(60)
@pytest.mark.slow
async def test_a_chunk_whose_handler_never_returned_is_parked_unrun_past_its_last_attempt(configure):
    services = configure(CHUNK_MAX_ITEMS="5", MAX_DEQUEUE_COUNT="2", HANDLER="tests.app.handlers:record")
    batch_id = await submit_ids(services, [f"h-{i}" for i in range(3)])
    await hang(services, 3)  # the one after the last attempt still calls the handler: it hung too

    await until_visible(services, 1)
    await drain_all(services)

    assert not handlers.calls, "no handler call past the delivery after the last attempt"
    status = await read_batch_status(services, batch_id)
    assert status["status"] == "completed_with_failures", "the batch becomes final"
    assert (status["items"]["failed"], status["items"]["pending"]) == (3, 0)
    lines = await export(services, batch_id)
    assert [line["status"] for line in lines] == ["failed"] * 3
    assert all(line["reason"].startswith(f"{NO_OUTCOME} after 3 deliveries") for line in lines), lines[0]
    [parked] = await parked_texts(services)
    assert (parked.info.failed, parked.info.attempt) == (3, 4)
    assert parked.info.reason.startswith(f"{NO_OUTCOME} after 3 deliveries (MAX_DEQUEUE_COUNT 2)")
    work = services.storage.queue(services.settings.work_queue)
    assert await work.peek_messages(max_messages=32) == [], "its message is deleted"


@pytest.mark.timeout(60)
@pytest.mark.slow
async def test_the_delivery_after_the_last_attempt_still_calls_the_handler(configure):
    services = configure(CHUNK_MAX_ITEMS="5", MAX_DEQUEUE_COUNT="2", HANDLER="tests.app.handlers:record")
    batch_id = await submit_ids(services, [f"n-{i}" for i in range(3)])
    await hang(services, 2)

    await until_visible(services, 1)
    await drain_all(services)

    assert dict(handlers.calls) == {"n-0": 1, "n-1": 1, "n-2": 1}
    assert (await read_batch_status(services, batch_id))["status"] == "completed"
    assert await parked_texts(services) == []


@pytest.mark.timeout(90)
@pytest.mark.slow
async def test_a_chunk_parked_for_no_outcome_is_replayed_like_any_parked_chunk(configure, app_functions: Any):
    services = configure(CHUNK_MAX_ITEMS="5", MAX_DEQUEUE_COUNT="2", HANDLER="tests.app.handlers:record")
    batch_id = await submit_ids(services, [f"p-{i}" for i in range(8)])  # chunks 0 (5 items) and 1 (3)
    held = await hold_first_chunk(services)  # chunk 0 on its way: the batch stays processing
    await hang(services, 3, chunk=1)
    await until_visible(services, 1)
    await drain_all(services)
    assert not handlers.calls
    assert (await read_batch_status(services, batch_id))["items"]["failed"] == 3

    code, listing = await call(app_functions, "poison_list", http_request("GET", "/api/poison"))
    assert code == 200
    [entry] = listing["partitions"][0]["first"]
    assert entry["replayable"]
    assert entry["reason"].startswith(f"{NO_OUTCOME} after 3 deliveries (MAX_DEQUEUE_COUNT 2)"), entry
    code, replayed = await post_replay(app_functions, {"batch_id": batch_id})
    assert (code, replayed["replayed"]) == (200, 1)

    await held.release()
    await drain_all(services)
    status = await read_batch_status(services, batch_id)
    assert status["status"] == "completed"
    assert status["items"] == {"total": 8, "succeeded": 8, "failed": 0, "pending": 0}
    assert sorted(handlers.calls.items()) == [(f"p-{i}", 1) for i in range(8)], "the replay ran each item once"


@pytest.mark.timeout(60)
@pytest.mark.slow
async def test_a_recorded_chunk_that_comes_back_past_its_last_attempt_is_finished_by_its_record_not_parked(
    configure,
):
    """MAX_DEQUEUE_COUNT 1: the delivery that recorded every item a success lost its delete, and the next one died
    too; the third is past the threshold, and its lineage's record settles it (c67e0de): deleted, nothing parked,
    values kept."""
    services = configure(CHUNK_MAX_ITEMS="5", MAX_DEQUEUE_COUNT="1", HANDLER="tests.app.handlers:record")
    batch_id = await submit_ids(services, [f"k-{i}" for i in range(3)])
    message = await first_delivery(services, 0)
    await record_then_die(services, message, [ItemOutcome.success({"n": p}) for p in range(3)])
    await hang(services, 1)

    await until_visible(services, 1)
    await drain_all(services)

    assert not handlers.calls
    status = await read_batch_status(services, batch_id)
    assert status["status"] == "completed"
    assert [line.get("value") for line in await export(services, batch_id)] == [{"n": p} for p in range(3)]
    assert await parked_texts(services) == [], "nothing parked"
    work = services.storage.queue(services.settings.work_queue)
    assert await work.peek_messages(max_messages=32) == []
