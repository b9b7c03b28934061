"""An idempotency key against the real Azurite: the same key returns the same batch and enqueues nothing twice, another
body under it is a conflict, and a submission that stopped halfway resumes with its key without any item handled
twice."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from shared.intake.submit import claim, prepare, store
from shared.ops.reports import read_batch_status
from tests.app import handlers
from tests.app.conftest import (
    drain_all,
    queue_depth,
)
from tests.app.sales import SALE, submit_ids


async def test_an_idempotency_key_returns_the_same_batch_and_enqueues_nothing_twice(configure):
    services = configure(HANDLER="tests.app.handlers:record", CHUNK_MAX_ITEMS="10")
    ids = [f"i-{i}" for i in range(35)]
    first = await submit_ids(services, ids, key="order-42")
    again = await submit_ids(services, ids, key="order-42")

    assert again == first
    assert await queue_depth(services.storage.queue(services.settings.work_queue)) == 4
    await drain_all(services)
    assert set(handlers.calls.values()) == {1}


async def test_an_idempotency_key_reused_with_another_body_is_a_conflict(configure):
    from shared.core.errors import IdempotencyConflict

    services = configure()
    await submit_ids(services, ["k-1"], key="k")
    with pytest.raises(IdempotencyConflict, match="different body"):
        await submit_ids(services, ["k-2"], key="k")
    assert await queue_depth(services.storage.queue(services.settings.work_queue)) == 1


async def test_a_submission_that_stopped_halfway_resumes_with_its_key_and_no_item_is_handled_twice(configure):
    from shared.batch.batches import Manifest, State, items_digest, new_attempt, new_batch_id
    from shared.batch.chunking import plan_chunks
    from shared.intake.body import encode_item

    services = configure(HANDLER="tests.app.handlers:record", CHUNK_MAX_ITEMS="10")
    ids = [f"h-{i}" for i in range(40)]
    # The first attempt: manifest written, two of four chunks enqueued, then the process died.
    items = [encode_item({"id": i, **SALE}) for i in ids]
    chunks = plan_chunks(items, max_items=10, max_bytes=10**6)
    queue = services.settings.work_queue
    manifest = Manifest(
        new_batch_id("resume-me"), new_attempt(), State.STAGING, 40, (10, 10, 10, 10), (queue,),
        items_digest(items), datetime.now(timezone.utc).isoformat(),
    )  # fmt: skip
    container = await services.storage.ensure_container(services.settings.batches_container)
    await claim(container, manifest)
    await store(services, prepare(manifest, chunks[:2], [queue, queue]))

    batch_id = await submit_ids(services, ids, key="resume-me")
    report = await drain_all(services)

    assert batch_id == manifest.batch_id
    assert report.stale == 2, "the first attempt's chunks are discarded unprocessed"
    assert set(handlers.calls) == set(ids)
    assert set(handlers.calls.values()) == {1}
    assert (await read_batch_status(services, batch_id))["status"] == "completed"
