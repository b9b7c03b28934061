"""Result records in storage: the drain's group commit and reading records back, on the real Azurite."""

from __future__ import annotations

import asyncio

import pytest
from azure.storage.blob.aio import ContainerClient

from shared.batch import envelope, results
from shared.batch.settlement import ResultRecord, settle
from shared.core.errors import StorageError
from shared.handlers import ItemOutcome
from shared.ops.reports import read_batch_status
from shared.store.result_store import ResultWriter, list_entries, read_records
from tests.app.conftest import drain_all
from tests.app.sales import submit_ids


def record(batch_id: str, chunk: int, n: int = 3, *, attempt: int = 1, ok: bool = True) -> ResultRecord:
    outcome = ItemOutcome.success({"chunk": chunk}) if ok else ItemOutcome.failure("no", retryable=False)
    s = settle(batch_id=batch_id, chunk=chunk, gen=0, positions=list(range(n)), outcomes=[outcome] * n,
               attempt=attempt, max_attempts=5)  # fmt: skip
    return s.record


async def blobs_of(container: ContainerClient, batch_id: str) -> int:
    return len([blob async for blob in container.list_blobs(name_starts_with=f"{batch_id}/")])


async def test_records_settled_together_share_a_blob_and_each_reads_back(configure):
    services = configure()
    container = await services.storage.ensure_container(services.settings.results_container)
    writer = ResultWriter(container)
    a, b = "a" * 32, "b" * 32
    writes = [writer.write(record(a, c)) for c in range(100)] + [writer.write(record(b, c)) for c in range(7)]
    await asyncio.gather(*writes)

    written = len([blob.name async for blob in container.list_blobs()])
    assert written <= 6, f"107 records in {written} blobs: a group commit, not one each"
    assert sorted(e.chunk for e in await list_entries(container, a)) == list(range(100))
    back = await read_records(container, b)
    assert sorted(r["chunk"] for r in back) == list(range(7))
    assert all(results.successes(r) == [(p, {"chunk": r["chunk"]}) for p in range(3)] for r in back)


async def test_a_lone_record_is_written_at_once_and_groups_stay_within_their_cap(configure):
    services = configure()
    container = await services.storage.ensure_container(services.settings.results_container)
    writer = ResultWriter(container, max_records=10)
    await writer.write(record("c" * 32, 0))
    assert await blobs_of(container, "c" * 32) == 1, "nobody waits for company"
    await asyncio.gather(*(writer.write(record("c" * 32, c)) for c in range(1, 41)))
    assert await blobs_of(container, "c" * 32) >= 5, "41 records at no more than 10 a blob"
    assert len(await list_entries(container, "c" * 32)) == 41


async def test_a_failed_write_fails_every_record_it_carried_and_the_writer_recovers(configure):
    services = configure()
    container = services.storage.container(services.settings.results_container)  # not created yet
    writer = ResultWriter(container)
    outcomes = await asyncio.gather(*(writer.write(record("d" * 32, c)) for c in range(5)), return_exceptions=True)
    assert all(isinstance(o, StorageError) for o in outcomes), outcomes
    await services.storage.ensure_container(services.settings.results_container)
    await writer.write(record("d" * 32, 9))
    assert [e.chunk for e in await list_entries(container, "d" * 32)] == [9], "failed records were not written"


async def test_a_cancelled_writer_leaves_nobody_waiting(configure):
    services = configure()
    container = await services.storage.ensure_container(services.settings.results_container)
    writer = ResultWriter(container)
    waiters = [asyncio.ensure_future(writer.write(record("e" * 32, c))) for c in range(20)]
    await asyncio.sleep(0)
    await writer.cancel()
    done = await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), timeout=10)
    assert all(o is None or isinstance(o, asyncio.CancelledError) for o in done), done
    assert any(isinstance(o, asyncio.CancelledError) for o in done)


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_a_chunk_redelivered_after_its_record_was_written_keeps_that_record_and_is_not_worked_again(configure):
    """A drain that died between writing a chunk's record and deleting its message: the message comes back (attempt
    2) and is deleted with no handler call and no second record: an outcome once recorded never changes (before
    issue 37 it was worked again and its newest record, all ok, replaced the failures)."""
    services = configure(CHUNK_MAX_ITEMS="10", VISIBILITY_TIMEOUT_S="1")
    batch_id = await submit_ids(services, [f"r-{i}" for i in range(10)])
    queue = services.storage.queue(services.settings.work_queue)
    [message] = [m async for m in queue.receive_messages(messages_per_page=1, max_messages=1, visibility_timeout=1)]
    header = envelope.decode(str(message.content)).header
    container = await services.storage.ensure_container(services.settings.results_container)
    # What the first delivery recorded before dying: every item failed (its message was never deleted).
    await ResultWriter(container).write(record(batch_id, header.chunk, 10, ok=False))
    assert (await read_batch_status(services, batch_id))["items"]["failed"] == 10
    await asyncio.sleep(1.5)

    report = await drain_all(services)

    assert (report.items_ok, report.items_failed, report.chunks_done) == (0, 0, 1)
    status = await read_batch_status(services, batch_id)
    assert status["items"] == {"total": 10, "succeeded": 0, "failed": 10, "pending": 0}
    assert await blobs_of(container, batch_id) == 1, "no second record"
    [kept] = await read_records(container, batch_id)
    assert kept["attempt"] == 1
    assert await queue.peek_messages(max_messages=1) == [], "its message is deleted"
