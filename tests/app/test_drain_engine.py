"""The drain engine against the real Azurite: retries, poison, cancellation, leases, wake-ups, events.

Service Bus is the recording publisher here (see conftest): these tests assert exactly which trigger
events the engine emits. The real publisher and broker are exercised in test_function_app_e2e.py.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import pytest

from shared.batch import envelope, poison, results
from shared.core import layout
from shared.core.events import Reason
from shared.engine.drainer import Drainer
from shared.intake.submit import claim, prepare, store, submit
from shared.ops.reports import read_batch_status
from shared.services import Services
from shared.store.result_store import read_records
from tests.app import handlers
from tests.app.conftest import (
    RecordingPublisher,
    another_instance,
    drain_all,
    drain_once_due,
    queue_depth,
    retrying_once,
    the_retry_due,
    with_settings,
)

SALE = {"amount": "10.00", "currency": "EUR", "author": "a", "distributor": "d"}


def ndjson(ids: list[str], **extra: Any) -> bytes:
    return "\n".join(json.dumps({"id": i, **SALE, **extra}) for i in ids).encode()


async def submit_ids(services: Services, ids: list[str], key: str | None = None, **extra: Any) -> str:
    done = await submit(
        services,
        ndjson(ids, **extra),
        content_type="application/x-ndjson",
        content_encoding=None,
        idempotency_key=key,
    )
    return done.manifest.batch_id


async def result_positions(services: Services, batch_id: str) -> Counter[tuple[int, int]]:
    """(chunk, position) -> how many result records hold it as settled (ok or failed), as status reads them."""
    container = services.storage.container(services.settings.results_container)
    seen: Counter[tuple[int, int]] = Counter()
    for record in await read_records(container, batch_id):
        for position in [p for p, _ in results.successes(record)] + [f["i"] for f in record["failed"]]:
            seen[(record["chunk"], position)] += 1
    return seen


async def poison_messages(services: Services) -> list[poison.PoisonMessage]:
    queue = services.storage.queue(services.settings.poison_queue(services.settings.work_queue))
    return [poison.decode(m.content) for m in await queue.peek_messages(max_messages=32)]


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
async def test_a_drain_cancelled_mid_chunk_loses_nothing_and_a_second_drain_completes(configure):
    services = configure(HANDLER="tests.app.handlers:blocking", CHUNK_MAX_ITEMS="100", VISIBILITY_TIMEOUT_S="1")
    ids = [f"c-{i}" for i in range(300)]
    batch_id = await submit_ids(services, ids)

    first = asyncio.create_task(drain_all(services))
    await asyncio.wait_for(handlers.entered.wait(), 20)
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    assert first.cancelled()
    assert handlers.cancelled, "the chunk in progress was cancelled with the drain, not left running"
    assert services.draining == set()
    assert (await read_batch_status(services, batch_id))["items"]["succeeded"] == 0

    handlers.release.set()
    await asyncio.sleep(1.5)  # the cancelled drain's messages become visible again
    await drain_all(services)

    status = await read_batch_status(services, batch_id)
    assert status["status"] == "completed"
    assert status["items"]["succeeded"] == 300
    assert set(handlers.calls) == set(ids)
    assert set((await result_positions(services, batch_id)).values()) == {1}


async def test_only_one_instance_drains_a_queue_slot_and_a_trigger_storm_does_no_extra_work(configure):
    services = configure(HANDLER="tests.app.handlers:record", CHUNK_MAX_ITEMS="20")
    ids = [f"s-{i}" for i in range(400)]
    batch_id = await submit_ids(services, ids)
    others = [another_instance(services) for _ in range(3)]

    reports = await asyncio.gather(
        *(Drainer(s, services.settings.work_queue).run() for s in [services, *others] for _ in range(10))
    )

    outcomes = Counter(r.outcome for r in reports)
    assert outcomes["empty"] >= 1
    assert outcomes["empty"] + outcomes["lease-taken"] + outcomes["busy-here"] == 40
    assert sum(r.chunks_done for r in reports) == 20
    assert set(handlers.calls.values()) == {1}, "no item handled twice"
    assert sum(r.transactions.get("queue.GetMessages", 0) for r in reports if r.outcome == "busy-here") == 0
    assert (await read_batch_status(services, batch_id))["status"] == "completed"
    for other in others:
        await other.storage.close()


@pytest.mark.slow
async def test_work_arriving_while_the_lease_is_held_is_drained_by_the_holder_after_release(configure):
    services = configure(HANDLER="tests.app.handlers:record", CHUNK_MAX_ITEMS="10")
    first = await submit_ids(services, [f"a-{i}" for i in range(10)])
    late: dict[str, Any] = {}
    rival = another_instance(services)

    class ArrivalAtTheWorstMoment(Drainer):
        """The real engine; a batch arrives after its receivers found the queue empty, before it lets go."""

        async def _drain(self, lease: Any) -> bool:
            more = await super()._drain(lease)
            if not late:
                late["batch"] = await submit_ids(services, [f"b-{i}" for i in range(10)])
                # The late batch's trigger reaches another instance, which finds the lease taken.
                late["rival"] = await Drainer(rival, services.settings.work_queue).run()
            return more

    report = await ArrivalAtTheWorstMoment(services, services.settings.work_queue).run()
    await rival.storage.close()

    assert late["rival"].outcome == "lease-taken"
    assert report.sessions == 2, "the holder looked again after releasing the lease and went on"
    for batch in (first, late["batch"]):
        assert (await read_batch_status(services, batch))["status"] == "completed"


async def test_a_deep_queue_recruits_more_drainers_by_the_depth_rule(configure):
    publisher = RecordingPublisher()
    services = configure(
        publisher=publisher, HANDLER="tests.app.handlers:record", CHUNK_MAX_ITEMS="1", SCALE_OUT_DEPTH="40",
        MAX_DRAINERS_PER_QUEUE="3",
    )  # fmt: skip
    await submit_ids(services, [f"d-{i}" for i in range(200)])

    await drain_all(services)

    scale_outs = sorted(e.slot for e, _ in publisher.events if e.reason is Reason.SCALE_OUT)
    assert scale_outs == [1, 2], "slots 1..MAX-1 recruited once each"
    assert all(e.queue == services.settings.work_queue for e, _ in publisher.events)


async def test_the_watchdog_is_scheduled_at_start_and_cancelled_on_a_clean_exit(configure):
    publisher = RecordingPublisher()
    services = configure(publisher=publisher, HANDLER="tests.app.handlers:record", LEASE_S="15")
    await submit_ids(services, ["w-1"])
    publisher.events.clear()
    before = datetime.now(timezone.utc)

    await drain_all(services)

    watchdogs = [(e, at) for e, at in publisher.events if e.reason is Reason.WATCHDOG]
    assert len(watchdogs) == 1
    delay = (watchdogs[0][1] - before).total_seconds()
    assert 15 <= delay <= 15 + 60 + 10, "past the lease and visibility expiry"
    cancelled = [publisher.scheduled[n].reason for n in publisher.cancelled]
    assert cancelled == [Reason.WATCHDOG], "cancelled because the drain ended cleanly"


async def test_a_cancelled_drain_leaves_its_watchdog_in_place(configure):
    publisher = RecordingPublisher()
    services = configure(publisher=publisher, HANDLER="tests.app.handlers:blocking")
    await submit_ids(services, ["x-1"])
    task = asyncio.create_task(drain_all(services))
    await asyncio.wait_for(handlers.entered.wait(), 20)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    assert [e.reason for e, _ in publisher.events].count(Reason.WATCHDOG) == 1
    assert publisher.cancelled == []


@pytest.mark.slow
async def test_a_delayed_retry_schedules_a_retry_due_event_for_when_it_is_visible(configure):
    services, publisher = retrying_once(configure, 2000)
    batch_id = await submit_ids(services, ["trans-1", "ok-1"])
    start = datetime.now(timezone.utc)

    await drain_all(services)

    due = the_retry_due(publisher)
    # Visible again after 2 s; the wake-up comes WAKE_MARGIN_MS (3 s) to RETRY_WINDOW_MS (5 s) after that.
    assert 2 + 3 <= (due - start).total_seconds() <= 2 + 5 + 2
    assert (await read_batch_status(services, batch_id))["status"] == "processing"
    await drain_once_due(services, due)
    assert (await read_batch_status(services, batch_id))["status"] == "completed"


async def test_a_drain_out_of_time_publishes_continue_and_the_next_one_finishes(configure):
    publisher = RecordingPublisher()
    services = configure(publisher=publisher, HANDLER="tests.app.handlers:record", CHUNK_MAX_ITEMS="5")
    batch_id = await submit_ids(services, [f"b-{i}" for i in range(50)])

    spent = await Drainer(services, services.settings.work_queue, budget_s=0).run()

    assert spent.outcome == "budget"
    assert spent.messages == 0
    assert publisher.reasons().count("continue") == 1
    await drain_all(services)
    assert (await read_batch_status(services, batch_id))["status"] == "completed"


@pytest.mark.parametrize(("scale_out_depth", "outcome", "continues"), [("50", "shrunk", 0), ("2", "budget", 1)])
async def test_a_recruited_drainer_out_of_time_goes_on_only_while_the_depth_deserves_its_slot(
    configure, scale_out_depth, outcome, continues
):
    """10 chunks waiting: at 50 per drainer they deserve one drainer, so slot 1 ends and its instance can go;
    at 2 per drainer they deserve five, so slot 1 publishes `continue` for itself."""
    publisher = RecordingPublisher()
    services = configure(
        publisher=publisher, HANDLER="tests.app.handlers:record", CHUNK_MAX_ITEMS="5", SCALE_OUT_DEPTH=scale_out_depth
    )
    await submit_ids(services, [f"s-{i}" for i in range(50)])

    spent = await Drainer(services, services.settings.work_queue, slot=1, budget_s=0).run()

    assert spent.outcome == outcome
    assert publisher.reasons().count("continue") == continues
    assert await queue_depth(services.storage.queue(services.settings.work_queue)) == 10  # nothing taken or lost


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
