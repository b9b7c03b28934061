"""Interleavings of the drain engine a code review found (issue 18), each reproduced at its await point.

Against the real Azurite; Service Bus is the recording publisher of tests/app/conftest.py (it can be made to fail
one call). Where a storage fault is needed at one exact call, the test wraps that SDK call to raise the SDK's own
exception (`HttpResponseError` with the service's 503), which the app's boundary translates as it would a real one.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.queue.aio import QueueClient
from hypothesis import given
from hypothesis import strategies as st

from shared.batch.verdicts import CommittedAttempts
from shared.bus.publisher import TriggerUnavailable
from shared.core.events import Reason, TriggerEvent
from shared.engine.drainer import Drainer
from shared.intake.submit import submit
from shared.store import poison_index
from tests.app import handlers
from tests.app.conftest import RecordingPublisher, drain_all
from tests.app.held import Held, hold_first_chunk
from tests.app.test_drain_engine import poison_messages, submit_ids

# A message put with time_to_live=-1 expires at the end of the calendar (the service's way of saying never).
NEVER = datetime(9999, 1, 1, tzinfo=timezone.utc)


def unavailable() -> HttpResponseError:
    error = HttpResponseError(message="Server Busy")
    error.status_code = 503
    return error


# -- 5: a failed scale-out probe ------------------------------------------------------------------------------


async def test_a_failed_scale_out_probe_is_best_effort_and_the_session_goes_on(configure, monkeypatch):
    publisher = RecordingPublisher()
    services = configure(publisher=publisher, HANDLER="tests.app.handlers:record", CHUNK_MAX_ITEMS="1")
    ids = [f"p-{i}" for i in range(80)]  # 80 chunks: the first page is full, so the drainer probes the depth
    await submit_ids(services, ids)
    probes = []

    async def failing_probe(self: QueueClient, **kwargs: Any) -> Any:
        probes.append(self.queue_name)
        raise unavailable()

    monkeypatch.setattr(QueueClient, "get_queue_properties", failing_probe)
    report = await Drainer(services, services.settings.work_queue).run()

    assert probes, "the probe was made (and failed)"
    assert report.outcome == "empty"
    assert report.items_ok == 80
    assert all(handlers.calls[i] == 1 for i in ids), "no chunk was cut off and redone"


# -- 8: the committed-attempt cache -------------------------------------------------------------------------


def test_committed_attempts_are_bounded_in_number_and_in_age() -> None:
    cache = CommittedAttempts(max_entries=2, max_age_s=60)
    cache.put("a", "1", now=0)
    cache.put("b", "1", now=1)
    cache.put("c", "1", now=2)
    assert len(cache) == 2
    assert cache.get("a", now=3) is None, "the oldest went first"
    assert cache.get("c", now=62) == "1"
    assert cache.get("c", now=62.5) is None, "a verdict older than its age is read again from the manifest"


async def test_a_long_lived_host_keeps_a_bounded_memory_of_committed_batches(configure):
    services = configure(HANDLER="tests.app.handlers:record")
    assert isinstance(services.committed, CommittedAttempts)
    assert services.committed.max_entries <= 100_000
    await submit_ids(services, ["c-1"])
    await drain_all(services)
    assert len(services.committed) == 1


# -- 9: messages never expire on their own ---------------------------------------------------------------


async def test_work_and_poison_messages_never_expire_on_their_own(configure):
    services = configure(HANDLER="tests.app.handlers:mixed", CHUNK_MAX_ITEMS="2")
    await submit_ids(services, ["ok-0", "ok-00", "ok-1", "perm-1"])
    work = services.storage.queue(services.settings.work_queue)
    queued = await work.peek_messages(max_messages=32)
    assert len(queued) == 2
    assert all(q.expires_on is not None and q.expires_on >= NEVER for q in queued), queued

    await hold_first_chunk(services)  # its batch is not final, so its parked chunk can be replayed
    await drain_all(services)

    poison = services.storage.queue(services.settings.poison_queue(services.settings.work_queue))
    (parked,) = await poison.peek_messages(max_messages=32)
    assert parked.expires_on is not None
    assert parked.expires_on >= NEVER, parked.expires_on
    assert len(await poison_messages(services)) == 1

    from shared.ops import replay

    assert (await replay.replay(services))["replayed"] == 1
    (replayed,) = await work.peek_messages(max_messages=32)
    assert replayed.expires_on is not None
    assert replayed.expires_on >= NEVER, replayed.expires_on


# -- 11: a failed watchdog reschedule --------------------------------------------------------------------------


class FailingWatchdogs(RecordingPublisher):
    """The recording publisher, refusing every watchdog after the first `allowed`."""

    def __init__(self, allowed: int) -> None:
        super().__init__()
        self.allowed = allowed

    async def publish(self, event: TriggerEvent, *, at: datetime | None = None) -> int | None:
        if event.reason is Reason.WATCHDOG:
            if self.allowed <= 0:
                raise TriggerUnavailable("Service Bus refused the watchdog (test)")
            self.allowed -= 1
        return await super().publish(event, at=at)


@pytest.mark.parametrize("allowed", [1, 2])
async def test_a_failed_watchdog_reschedule_keeps_the_previous_watchdog(configure, allowed):
    publisher = FailingWatchdogs(allowed)
    services = configure(publisher=publisher, HANDLER="tests.app.handlers:record")
    drainer = Drainer(services, services.settings.work_queue)

    await drainer.wakeups.schedule_watchdog()  # the first, at the session's start
    assert drainer.wakeups._watchdog is not None
    first = drainer.wakeups._watchdog[0]
    await drainer.wakeups.schedule_watchdog()  # a reschedule at a lease renewal: refused when allowed == 1

    watchdogs = [at for e, at in publisher.events if e.reason is Reason.WATCHDOG]
    assert len(watchdogs) == allowed
    if allowed == 1:
        assert publisher.cancelled == [], "the only watchdog that exists stays"
        assert drainer.wakeups._watchdog[0] == first, "and is still the one the drainer will cancel on a clean exit"
    else:
        assert publisher.cancelled == [first], "the old one goes once the new one exists"
    assert watchdogs[-1] is not None
    assert watchdogs[-1] > datetime.now(timezone.utc) + timedelta(seconds=10)


# -- 1: a resumed submit later than STAGING_TTL_S ---------------------------------------------------------------


async def test_a_resumed_submit_is_judged_by_its_own_attempt_not_the_first_one(configure, monkeypatch):
    """The first attempt began two hours ago and stopped; the key's retry comes now. A drainer that meets a
    chunk of the retry while it is still enqueueing must wait for it, not discard it as abandoned."""
    from shared.batch.batches import Manifest, State, items_digest, new_attempt, new_batch_id
    from shared.batch.chunking import plan_chunks
    from shared.intake.body import encode_item
    from shared.intake.submit import claim, prepare, store
    from tests.app.test_drain_engine import SALE

    services = configure(HANDLER="tests.app.handlers:record", CHUNK_MAX_ITEMS="10", STAGING_TTL_S="3600")
    items = [encode_item({"id": f"r-{i}", **SALE}) for i in range(20)]
    chunks = plan_chunks(items, max_items=10, max_bytes=10**6)
    queue = services.settings.work_queue
    long_ago = datetime.now(timezone.utc) - timedelta(hours=2)
    batch_id = new_batch_id("late-retry")

    def manifest(at: datetime) -> Manifest:
        return Manifest(
            batch_id, new_attempt(), State.STAGING, 20, (10, 10), (queue,), items_digest(items), at.isoformat()
        )

    container = await services.storage.ensure_container(services.settings.batches_container)
    await claim(container, manifest(long_ago))  # the first attempt, which stopped before enqueueing
    resumed = await claim(container, manifest(datetime.now(timezone.utc)))  # the key's retry, now
    assert isinstance(resumed, tuple)
    assert resumed[0].created_at == long_ago.isoformat(), "readers still see when the batch was first created"
    await store(services, prepare(resumed[0], chunks[:1], [queue]))  # still enqueueing: one chunk so far

    hidden_s: list[int] = []  # each put-back's visibility timeout, as the queue is asked for it
    update_message = QueueClient.update_message

    async def noting(client: QueueClient, *args: Any, **kwargs: Any) -> Any:
        hidden_s.append(kwargs["visibility_timeout"])
        return await update_message(client, *args, **kwargs)

    monkeypatch.setattr(QueueClient, "update_message", noting)
    report = await Drainer(services, queue).run()

    # However long the drain took (a busy machine may receive the chunk again after its first second), the
    # chunk was put back, first for 1 s (a fresh attempt's wait, not 2), never deleted, and comes back.
    assert report.waiting >= 1, "the retry's chunk is put back until the retry commits"
    assert hidden_s[:1] == [1], hidden_s
    assert (await services.storage.queue(queue).get_queue_properties()).approximate_message_count == 1
    assert await visible_again(services.storage.queue(queue)), "hidden for a while, not deleted"


async def visible_again(queue: QueueClient, deadline_s: float = 60.0) -> bool:
    """Whether a message of the queue is visible again within a generous deadline (the event, not a duration)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + deadline_s
    while loop.time() < until:
        if await queue.peek_messages():
            return True
        await asyncio.sleep(0.1)
    return False


# -- 7 and 10: replay races ---------------------------------------------------------------------------------

FIXED = {"now": False}


async def fixable(items: list[Any], context: Any) -> Any:
    """`bad-*` items fail permanently until FIXED["now"]; everything else succeeds."""
    from shared.handlers import ChunkResult, ItemOutcome

    out = []
    for item in items:
        handlers.calls[item["id"]] += 1
        broken = item["id"].startswith("bad-") and not FIXED["now"]
        out.append(ItemOutcome.failure("bad item", retryable=False) if broken else ItemOutcome.success())
    return ChunkResult(out)


@pytest.fixture
def fixable_handler():
    FIXED["now"] = False
    yield "tests.app.test_engine_interleavings:fixable"
    FIXED["now"] = False


async def parked_then_fixed(configure, handler: str) -> tuple[Any, str]:
    """Chunk 1 (ok-1, bad-1, ok-2) parked while chunk 0 is held back (the batch is not final), then the cause
    fixed; `finish` releases chunk 0."""
    services = configure(publisher=RecordingPublisher(), HANDLER=handler, CHUNK_MAX_ITEMS="3")
    batch_id = await submit_ids(services, ["held-1", "held-2", "held-3", "ok-1", "bad-1", "ok-2"])
    HELD[batch_id] = await hold_first_chunk(services)
    await drain_all(services)
    assert len(await poison_messages(services)) == 1
    FIXED["now"] = True
    return services, batch_id


HELD: dict[str, Held] = {}


async def finish(services: Any, batch_id: str) -> None:
    await HELD.pop(batch_id).release()
    await drain_all(services)


async def counts(services: Any, batch_id: str) -> dict[str, int]:
    from shared.ops.reports import read_batch_status

    return (await read_batch_status(services, batch_id))["items"]


async def test_a_duplicate_parked_copy_is_not_replayed_once_its_items_are_no_longer_failed(configure, fixable_handler):
    """The same parked chunk twice in the poison queue (a send repeated after a crash): the second copy's
    parent no longer holds its items as failed, so it is skipped, and the item is counted once."""
    from shared.ops import replay

    services, batch_id = await parked_then_fixed(configure, fixable_handler)
    poison = services.storage.queue(services.settings.poison_queue(services.settings.work_queue))
    (original,) = await poison.peek_messages()
    # The duplicate, parked and indexed as a drainer redoing the chunk after a crash would leave it.
    copy = await poison.send_message(original.content)
    state = services.storage.container(services.settings.state_container)
    entry = poison_index.Entry(poison.queue_name, copy.id, copy.pop_receipt, None, batch_id, original.content)
    await poison_index.add(state, entry)

    answer = await replay.replay(services, batch_id=batch_id)
    await finish(services, batch_id)

    assert answer["replayed"] == 1
    assert [s["why"] for s in answer["skipped"]] == [
        "its items are no longer failed (it was replayed already, or its record is missing)"
    ]
    assert await counts(services, batch_id) == {"total": 6, "succeeded": 6, "failed": 0, "pending": 0}
    assert handlers.calls["bad-1"] == 2, "once failed, once replayed: not twice replayed"


async def test_a_replay_meeting_a_concurrent_change_of_the_parent_record_reads_it_again(
    configure, fixable_handler, monkeypatch
):
    """Between the replay's read of the parent record and its conditional write, another writer rewrites the
    record (a concurrent replay, or a redelivery's group commit). The write's precondition fails; the replay
    must read again and move the items, not go on with them still failed (they would count twice)."""
    from shared.batch import results
    from shared.ops import replay, replay_marks
    from shared.store import storage

    services, batch_id = await parked_then_fixed(configure, fixable_handler)
    real_read = storage.read_json
    raced: list[str] = []

    async def read_then_race(container: Any, name: str) -> Any:
        doc, etag = await real_read(container, name)
        if not raced and name.startswith(f"{batch_id}/"):
            raced.append(name)
            # The other writer: the same record, a new etag.
            await storage.write_json(container, name, doc, metadata=results.blob_metadata(doc))
        return doc, etag

    monkeypatch.setattr(replay_marks, "read_json", read_then_race)
    answer = await replay.replay(services, batch_id=batch_id)
    await finish(services, batch_id)

    assert raced, "the race was injected"
    assert answer["replayed"] == 1
    assert await counts(services, batch_id) == {"total": 6, "succeeded": 6, "failed": 0, "pending": 0}


# -- 2, 3, 4, 12: every message left behind has a wake-up, and the watchdog comes after them -----------------

GATE: dict[str, Any] = {}


async def holding(items: list[Any], context: Any) -> Any:
    """`hold-*` items wait until GATE["open"] is set; `trans-*` fail on their first attempt; the rest succeed."""

    from shared.handlers import ChunkResult, ItemOutcome

    out = []
    for item in items:
        handlers.calls[item["id"]] += 1
        if item["id"].startswith("hold-"):
            GATE["entered"].set()
            await GATE["open"].wait()
        failing = item["id"].startswith("trans-") and context.attempt == 1
        out.append(ItemOutcome.failure("not yet") if failing else ItemOutcome.success())
    return ChunkResult(out)


@pytest.fixture
def gate():
    import asyncio

    GATE.update(entered=asyncio.Event(), open=asyncio.Event())
    yield GATE
    GATE["open"].set()
    GATE.clear()


HOLDING = "tests.app.test_engine_interleavings:holding"


async def test_a_retry_s_wake_up_is_scheduled_when_the_retry_is_written_not_at_the_session_s_end(configure, gate):
    """Chunk 0 fails once and is rewritten for a retry while chunk 1 is still being worked: its wake-up must
    exist then (a crash before the session's end would otherwise lose it), with a margin over its visibility."""
    import asyncio

    publisher = RecordingPublisher()
    services = configure(
        publisher=publisher, HANDLER=HOLDING, CHUNK_MAX_ITEMS="1", RETRY_BASE_DELAY_MS="2000",
        RETRY_MAX_DELAY_MS="2000", RETRY_JITTER="false",
    )  # fmt: skip
    await submit_ids(services, ["trans-1", "hold-1"])
    start = datetime.now(timezone.utc)
    drain = asyncio.create_task(Drainer(services, services.settings.work_queue).run())
    try:
        await asyncio.wait_for(gate["entered"].wait(), 20)
        for _ in range(100):
            if any(e.reason is Reason.RETRY_DUE for e, _ in publisher.events):
                break
            await asyncio.sleep(0.1)
        due = [at for e, at in publisher.events if e.reason is Reason.RETRY_DUE]
        assert not drain.done()
        assert len(due) == 1, "scheduled while the session still runs"
        assert due[0] is not None
        assert (due[0] - start).total_seconds() >= 2 + 3, "visible after 2 s; at least 3 s of margin after that"
    finally:
        gate["open"].set()
        await drain


def failing_extensions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Wraps the SDK's update_message: a visibility extension (no new content) answers 503. Returns the ids
    of the messages whose extension failed."""
    real = QueueClient.update_message
    failed: list[str] = []

    async def update_message(client: QueueClient, message: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("content") is None:
            failed.append(str(getattr(message, "id", message)))
            raise unavailable()
        return await real(client, message, *args, **kwargs)

    monkeypatch.setattr(QueueClient, "update_message", update_message)
    return failed


async def test_a_message_left_behind_by_a_failed_extension_gets_a_wake_up_for_when_it_reappears(
    configure, gate, monkeypatch
):
    publisher = RecordingPublisher()
    services = configure(publisher=publisher, HANDLER=HOLDING, VISIBILITY_TIMEOUT_S="2")
    await submit_ids(services, ["hold-1"])
    failed = failing_extensions(monkeypatch)
    start = datetime.now(timezone.utc)

    await Drainer(services, services.settings.work_queue).run()

    assert len(failed) == 1
    due = [at for e, at in publisher.events if e.reason is Reason.RETRY_DUE]
    assert len(due) == 1, "the message reappears by itself; a wake-up must come for it"
    assert due[0] is not None
    assert (due[0] - start).total_seconds() >= 2 + 3


async def test_a_message_left_behind_by_a_failed_result_write_gets_a_wake_up(configure, monkeypatch):
    from shared.core.errors import StorageUnavailable
    from shared.store.result_store import ResultWriter

    publisher = RecordingPublisher()
    services = configure(publisher=publisher, HANDLER="tests.app.handlers:record", VISIBILITY_TIMEOUT_S="4")
    await submit_ids(services, ["w-1"])

    async def unavailable_write(self: ResultWriter, record: Any) -> None:
        raise StorageUnavailable("write result group", "503 Server Busy (test)")

    monkeypatch.setattr(ResultWriter, "write", unavailable_write)
    start = datetime.now(timezone.utc)
    await Drainer(services, services.settings.work_queue).run()

    due = [at for e, at in publisher.events if e.reason is Reason.RETRY_DUE]
    assert len(due) == 1
    assert due[0] is not None
    assert (due[0] - start).total_seconds() >= 4 + 3


async def test_an_unreleased_lease_leaves_its_follow_up_for_when_it_has_expired(configure, monkeypatch):
    """The release fails (503) with work left: a `continue` now would meet our own lease and stop."""
    from azure.storage.blob.aio import BlobLeaseClient

    publisher = RecordingPublisher()
    services = configure(publisher=publisher, HANDLER="tests.app.handlers:record", LEASE_S="15")
    await submit_ids(services, ["l-1"])

    async def failing_release(self: BlobLeaseClient, **kwargs: Any) -> None:
        raise unavailable()

    monkeypatch.setattr(BlobLeaseClient, "release", failing_release)
    start = datetime.now(timezone.utc)
    report = await Drainer(services, services.settings.work_queue, slot=2, budget_s=0).run()

    follow_ups = [(e, at) for e, at in publisher.events if e.reason is Reason.CONTINUE]
    assert len(follow_ups) == 1
    event, at = follow_ups[0]
    assert event.slot == 2, "the follow-up is for the slot whose lease it is"
    assert at is not None, "not at once"
    assert (at - start).total_seconds() >= 15
    assert report.outcome == "lease-unreleased"


@pytest.mark.slow
async def test_the_watchdog_moves_past_the_latest_visibility_the_drainer_set(configure, gate):
    """Chunk 0 fails once and is hidden for its 60 s retry delay; chunk 1 keeps the session going past a lease
    renewal (LEASE_S=15: one every 5 s). Were the drainer to die then, its watchdog must come after that
    message reappears; the old code kept it at 35 s (lease or visibility timeout + 5 s)."""
    import asyncio

    publisher = RecordingPublisher()
    services = configure(
        publisher=publisher, HANDLER=HOLDING, CHUNK_MAX_ITEMS="1", LEASE_S="15", RETRY_BASE_DELAY_MS="60000",
        RETRY_MAX_DELAY_MS="60000", RETRY_JITTER="false",
    )  # fmt: skip
    await submit_ids(services, ["trans-1", "hold-1"])
    start = datetime.now(timezone.utc)
    drain = asyncio.create_task(Drainer(services, services.settings.work_queue).run())
    try:
        await asyncio.wait_for(gate["entered"].wait(), 20)
        await asyncio.sleep(8)  # at least one renewal after the retry was written
        watchdogs = [at for e, at in publisher.events if e.reason is Reason.WATCHDOG]
        assert watchdogs
        latest = watchdogs[-1]
        assert latest is not None
        assert (latest - start).total_seconds() > 60, "after the retried message reappears (60 s)"
    finally:
        drain.cancel()  # the drainer dies here
        await asyncio.gather(drain, return_exceptions=True)


# -- 6: a partly failed inline chunk that no longer fits inline --------------------------------------------


async def test_a_retried_part_of_an_inline_chunk_that_needs_a_claim_check_keeps_its_lineage(configure):
    """Four items fit one message inline; three of them (positions 1-3, random and incompressible) fail
    once and no longer fit with the room a poison envelope needs, so they go on in a claim check. They
    must keep generation 1 and positions 1-3: each position is then settled exactly once."""
    import base64
    import json
    import random

    from shared.core import layout
    from shared.ops.reports import read_batch_status
    from tests.app.test_drain_engine import result_positions

    services = configure(HANDLER="tests.app.handlers:mixed", CHUNK_MAX_ITEMS="4")
    rng = random.Random(6)
    items = [{"id": "ok-0"}] + [
        {"id": f"trans-{i}", "noise": base64.b64encode(rng.randbytes(11_900)).decode()} for i in range(1, 4)
    ]
    done = await submit(
        services,
        "\n".join(json.dumps(i) for i in items).encode(),
        content_type="application/x-ndjson",
        content_encoding=None,
        idempotency_key=None,
    )
    batch_id = done.manifest.batch_id
    blobs = services.storage.container(services.settings.batches_container)
    assert layout.claim_check_blob(batch_id, 0) not in [b.name async for b in blobs.list_blobs()], "inline"

    await drain_all(services)

    names = [b.name async for b in blobs.list_blobs(name_starts_with=f"{batch_id}/chunks/")]
    assert names == [layout.claim_check_blob(batch_id, 0, 1, first=1)], "generation 1, from position 1"
    assert [handlers.calls[f"trans-{i}"] for i in range(1, 4)] == [2, 2, 2]
    assert (await read_batch_status(services, batch_id))["items"] == {
        "total": 4,
        "succeeded": 4,
        "failed": 0,
        "pending": 0,
    }
    assert sorted((await result_positions(services, batch_id)).items()) == [((0, p), 1) for p in range(4)]


@given(
    sizes=st.lists(st.integers(1, 50), min_size=1, max_size=5),
    data=st.data(),
)
def test_no_chunk_ever_counts_more_settled_items_than_it_holds(sizes: list[int], data: st.DataObject) -> None:
    """Whatever records the listing holds (lineages overlapping after a stale replay, duplicates), the status
    never says more items succeeded than a chunk holds."""
    from shared.batch.batches import Manifest, State
    from shared.batch.results import ResultEntry
    from shared.ops.status import batch_status

    manifest = Manifest(
        "b" * 32, "a", State.ACCEPTED, sum(sizes), tuple(sizes), ("q",), "d", "2026-01-01T00:00:00+00:00"
    )
    entries = []
    for chunk, size in enumerate(sizes):
        for gen in range(data.draw(st.integers(1, 3))):
            ok = data.draw(st.integers(0, size))
            failed = data.draw(st.integers(0, size - ok))
            entries.append(ResultEntry(chunk, gen, 0, ok, failed, 0, datetime.now(timezone.utc)))
    items = batch_status(manifest, entries)["items"]
    assert items["succeeded"] + items["failed"] <= items["total"]
    assert items["pending"] == items["total"] - items["succeeded"] - items["failed"]
