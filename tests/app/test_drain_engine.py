"""The drain engine against the real Azurite: retries, poison, stable item keys, claim checks, partitions, and
a drain that storage stops or a downstream overloads. Cancellation, leases, wake-ups and the events a session
publishes are in test_drain_sessions.py; an idempotent submit in test_submit_idempotency.py.

Service Bus is the recording publisher here (see conftest): these tests assert exactly which trigger
events the engine emits. The real publisher and broker are exercised in test_function_app_e2e.py.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import replace
from datetime import datetime, timezone

import pytest

from shared.batch import envelope
from shared.core import layout
from shared.core.events import Reason
from shared.intake.submit import submit
from shared.ops.reports import read_batch_status
from tests.app import handlers
from tests.app.conftest import (
    RecordingPublisher,
    another_instance,
    drain_all,
    queue_depth,
    with_settings,
)
from tests.app.sales import poison_messages, result_positions, submit_ids


@pytest.mark.slow
async def test_failed_items_are_retried_alone_and_poisoned_after_max_dequeues(configure):
    services = configure(HANDLER="tests.app.handlers:fail_sevens", MAX_DEQUEUE_COUNT="3", CHUNK_MAX_ITEMS="10")
    ids = [f"t-{i}" for i in range(25)]
    batch_id = await submit_ids(services, ids)

    report = await drain_all(services)

    assert handlers.calls["t-7"] == 3, "the failing item is tried MAX_DEQUEUE_COUNT times"
    assert handlers.calls["t-17"] == 3
    assert {i: n for i, n in handlers.calls.items() if not i.endswith("7")} == {
        i: 1 for i in ids if not i.endswith("7")
    }, "every other item is handled once: only failed items are retried"
    status = await read_batch_status(services, batch_id)
    assert status["status"] == "completed_with_failures"
    assert status["items"] == {"total": 25, "succeeded": 23, "failed": 2, "pending": 0}
    assert status["chunks"]["poisoned"] == 2
    parked = await poison_messages(services)
    assert len(parked) == 2
    assert all("sevens are unlucky" in p.info.reason and "3 times" in p.info.reason for p in parked)
    assert all(p.info.failed == 1 for p in parked)
    assert report.items_retried == 4
    assert set((await result_positions(services, batch_id)).values()) == {1}


@pytest.mark.slow
async def test_each_item_carries_a_stable_key_its_retries_repeat_so_a_downstream_applies_it_once(configure):
    # Issue 40 item 9: the context gives each item's position and `batch_id:position`, the same on a retried subset.
    services = configure(HANDLER="tests.app.handlers:keyed_downstream", CHUNK_MAX_ITEMS="10")
    ids = [f"k-{i}" for i in range(25)]
    batch_id = await submit_ids(services, ids)

    await drain_all(services)

    expected = {item: f"{batch_id}:{position}" for position, item in enumerate(ids)}
    assert {item: set(keys) for item, keys in handlers.keys_seen.items()} == {k: {v} for k, v in expected.items()}
    assert len(handlers.keys_seen["k-7"]) == len(handlers.keys_seen["k-17"]) == 2, "retried alone, the same key"
    assert handlers.applied == dict.fromkeys(expected.values(), 1), "each item applied downstream once"
    status = await read_batch_status(services, batch_id)
    assert status["items"]["succeeded"] == 25


@pytest.mark.slow
async def test_a_chunk_enqueued_before_headers_carried_its_start_gets_the_same_keys(configure):
    # A chunk message without "o" (its start): the engine reads the start from the manifest instead.
    services = configure(HANDLER="tests.app.handlers:keyed_downstream", CHUNK_MAX_ITEMS="10")
    ids = [f"o-{i}" for i in range(25)]
    batch_id = await submit_ids(services, ids)
    queue = await services.storage.ensure_queue(services.settings.work_queue)
    messages = [m async for m in queue.receive_messages(max_messages=32)]
    assert len(messages) == 3
    for message in messages:
        old = envelope.decode(message.content)
        assert old.header.start is not None
        assert old.items is not None
        header = replace(old.header, start=None)
        await queue.send_message(envelope.encode_inline(header, envelope.encode_items(old.items)))
        await queue.delete_message(message)

    await drain_all(services)

    assert handlers.keys_seen == {
        item: [f"{batch_id}:{p}"] * (2 if item.endswith("7") else 1) for p, item in enumerate(ids)
    }


async def test_permanent_failures_are_poisoned_at_once_and_transient_ones_succeed_on_retry(configure):
    services = configure(HANDLER="tests.app.handlers:mixed", CHUNK_MAX_ITEMS="50")
    ids = (
        [f"ok-{i}" for i in range(20)] + ["perm-1", "trans-1", "perm-2", "trans-2"] + [f"ok-{i}" for i in range(20, 30)]
    )
    batch_id = await submit_ids(services, ids)

    await drain_all(services)

    assert handlers.calls["perm-1"] == 1, "a permanent failure is never retried"
    assert handlers.calls["trans-1"] == 2, "a transient failure succeeds on its retry"
    assert handlers.calls["ok-3"] == 1
    status = await read_batch_status(services, batch_id)
    assert status["items"] == {"total": 34, "succeeded": 32, "failed": 2, "pending": 0}
    assert status["status"] == "completed_with_failures"
    parked = await poison_messages(services)
    assert len(parked) == 1
    assert parked[0].info.failed == 2
    assert parked[0].info.reason.startswith("permanently invalid")
    replayable = envelope.decode(parked[0].chunk_text or "")
    assert [i["id"] for i in replayable.items or []] == ["perm-1", "perm-2"]
    assert Counter((await result_positions(services, batch_id)).values()) == Counter({1: 34})


@pytest.mark.slow
async def test_large_chunks_travel_as_compressed_claim_checks_and_retries_reference_them(configure):
    services = configure(HANDLER="tests.app.handlers:mixed", CHUNK_MAX_ITEMS="200")
    import random

    rng = random.Random(3)
    ids = [f"trans-{i}" if i % 50 == 0 else f"big-{i}" for i in range(200)]
    batch_id = await submit_ids(services, ids)  # compressible: fits inline, gzip-compressed
    # Random payloads do not compress: the same ids in a second batch need claim-check blobs.
    body = "\n".join(json.dumps({"id": i, "noise": rng.randbytes(200).hex()}) for i in ids).encode()
    done = await submit(
        services, body, content_type="application/x-ndjson", content_encoding=None, idempotency_key=None
    )
    blobs = [b.name async for b in services.storage.container(services.settings.batches_container).list_blobs()]
    assert layout.claim_check_blob(done.manifest.batch_id, 0) in blobs
    assert layout.claim_check_blob(batch_id, 0) not in blobs, "the compressible batch fitted inline"

    await drain_all(services)

    assert handlers.calls["trans-50"] == 4, "twice in each batch: failed once, then retried alone"
    status = await read_batch_status(services, done.manifest.batch_id)
    assert status["status"] == "completed"
    assert status["items"]["succeeded"] == 200


async def test_a_message_that_is_not_a_chunk_goes_to_the_poison_queue_whole(configure):
    services = configure()
    queue = await services.storage.ensure_queue(services.settings.work_queue)
    await queue.send_message("this is not an envelope")
    await queue.send_message(
        envelope.encode_inline(envelope.ChunkHeader("e" * 32, "att", 0), ["1"]) or ""
    )  # a chunk of a batch that has no manifest

    await drain_all(services)

    parked = await poison_messages(services)
    assert sorted(p.raw or "" for p in parked) == sorted(
        ["this is not an envelope", envelope.encode_inline(envelope.ChunkHeader("e" * 32, "att", 0), ["1"]) or ""]
    )
    assert any("no manifest" in p.info.reason for p in parked)
    assert await queue_depth(queue) == 0


async def test_a_handler_that_raises_fails_its_chunk_retryably_and_it_reaches_poison(configure):
    services = configure(HANDLER="tests.app.handlers:explodes", MAX_DEQUEUE_COUNT="2")
    batch_id = await submit_ids(services, ["e-1", "e-2"])

    await drain_all(services)

    parked = await poison_messages(services)
    assert len(parked) == 1
    assert "RuntimeError: the handler broke" in parked[0].info.reason
    assert (await read_batch_status(services, batch_id))["items"]["failed"] == 2


async def test_partitions_spread_chunks_over_queues_each_with_its_own_event_and_drain(configure):
    publisher = RecordingPublisher()
    services = configure(
        publisher=publisher, HANDLER="tests.app.handlers:record", WORK_QUEUE_PARTITIONS="3", CHUNK_MAX_ITEMS="10"
    )
    batch_id = await submit_ids(services, [f"p-{i}" for i in range(90)])

    queues = services.settings.partition_queues()
    submitted = sorted(e.queue for e, _ in publisher.events if e.reason is Reason.SUBMITTED)
    assert submitted == sorted(queues), "one trigger per partition the batch touched"
    depths = [await queue_depth(services.storage.queue(q)) for q in queues]
    assert depths == [3, 3, 3]
    for queue in queues:
        await drain_all(services, queue)
    assert (await read_batch_status(services, batch_id))["status"] == "completed"
    assert set(handlers.calls.values()) == {1}


@pytest.mark.slow
async def test_a_drain_that_storage_stops_comes_back_later_instead_of_burning_its_deliveries(configure):
    from devstack.azurite import AzuritePorts, connection_string
    from shared.core.events import TriggerEvent
    from shared.router import route

    publisher = RecordingPublisher()
    services = configure(publisher=publisher)
    unreachable = connection_string(AzuritePorts.free())  # nothing listens there: storage is "down"
    down = another_instance(with_settings(services, storage=services.settings.storage.__class__(
        "AzureWebJobsStorage", connection_string=unreachable
    )))  # fmt: skip
    event = TriggerEvent(services.settings.account_name, services.settings.work_queue, Reason.SUBMITTED)

    report = await route(down, event)
    await down.storage.close()

    assert report.outcome == "storage-failed"
    [(again, at)] = publisher.events
    assert again.reason is Reason.CONTINUE
    assert at is not None
    assert (at - datetime.now(timezone.utc)).total_seconds() > 3, "later, not at once"


@pytest.mark.slow
async def test_an_overloaded_downstream_pauses_the_drain_without_spending_attempts(configure):
    # MAX_DEQUEUE_COUNT 2: had the three overloads counted as attempts, the chunk would have been parked.
    services = configure(HANDLER="tests.app.handlers:overloaded_at_first", MAX_DEQUEUE_COUNT="2")
    ids = [f"o-{i}" for i in range(20)]
    batch_id = await submit_ids(services, ids)

    started = asyncio.get_running_loop().time()
    report = await drain_all(services)
    took = asyncio.get_running_loop().time() - started

    assert report.overloaded >= handlers.OVERLOADED_CALLS
    assert handlers.attempts_seen == [1] * len(handlers.attempts_seen), "no overload counted as an attempt"
    assert handlers.calls == {i: 1 for i in ids}
    assert took >= handlers.OVERLOADED_CALLS * 1.0, f"each Retry-After (1 s) was waited out: {took:.1f} s"
    status = await read_batch_status(services, batch_id)
    assert status["status"] == "completed", status
    assert await poison_messages(services) == []
