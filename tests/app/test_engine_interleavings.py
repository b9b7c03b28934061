"""Interleavings of the drain engine a code review found (issue 18), each reproduced at its await point: a failed
scale-out probe, the committed-attempt cache, messages that never expire, a failed watchdog reschedule, a resumed
submit, a partly failed inline chunk. The replay races are in test_replay_races.py, the wake-ups for what a session
leaves behind in test_wakeups_left_behind.py.

Against the real Azurite; Service Bus is the recording publisher of tests/app/conftest.py (it can be made to fail
one call). Where a storage fault is needed at one exact call, the test wraps that SDK call to raise the SDK's own
exception (`HttpResponseError` with the service's 503), which the app's boundary translates as it would a real one.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from azure.storage.queue.aio import QueueClient
from hypothesis import given
from hypothesis import strategies as st

from shared.batch.verdicts import CommittedAttempts
from shared.bus.publisher import TriggerUnavailable
from shared.core.events import Reason, TriggerEvent
from shared.engine.drainer import Drainer
from shared.intake.submit import submit
from tests.app import handlers
from tests.app.conftest import RecordingPublisher, drain_all, unavailable
from tests.app.held import hold_first_chunk
from tests.app.sales import poison_messages, submit_ids

# A message put with time_to_live=-1 expires at the end of the calendar (the service's way of saying never).
NEVER = datetime(9999, 1, 1, tzinfo=timezone.utc)

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
    from tests.app.sales import SALE

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
    from tests.app.sales import result_positions

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
