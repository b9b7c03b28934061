"""Interleavings of the drain engine a code review found (issue 18), each reproduced at its await point.

Against the real Azurite; Service Bus is the recording publisher of tests/app/conftest.py (it can be made to fail
one call). Where a storage fault is needed at one exact call, the test wraps that SDK call to raise the SDK's own
exception (`HttpResponseError` with the service's 503), which the app's boundary translates as it would a real one.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.queue.aio import QueueClient

from shared.drain import Drainer
from shared.events import Reason, TriggerEvent
from shared.publisher import TriggerUnavailable
from shared.verdicts import CommittedAttempts
from tests.app import handlers
from tests.app.conftest import RecordingPublisher, drain_all
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
    services = configure(HANDLER="tests.app.handlers:mixed", CHUNK_MAX_ITEMS="50")
    await submit_ids(services, ["ok-1", "perm-1"])
    work = services.storage.queue(services.settings.work_queue)
    (queued,) = await work.peek_messages(max_messages=32)
    assert queued.expires_on is not None
    assert queued.expires_on >= NEVER, queued.expires_on

    await drain_all(services)

    poison = services.storage.queue(services.settings.poison_queue(services.settings.work_queue))
    (parked,) = await poison.peek_messages(max_messages=32)
    assert parked.expires_on is not None
    assert parked.expires_on >= NEVER, parked.expires_on
    assert len(await poison_messages(services)) == 1

    from shared import replay

    await replay.replay(services)
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

    await drainer._schedule_watchdog()  # the first, at the session's start
    assert drainer._watchdog is not None
    first = drainer._watchdog[0]
    await drainer._schedule_watchdog()  # a reschedule at a lease renewal: refused when allowed == 1

    watchdogs = [at for e, at in publisher.events if e.reason is Reason.WATCHDOG]
    assert len(watchdogs) == allowed
    if allowed == 1:
        assert publisher.cancelled == [], "the only watchdog that exists stays"
        assert drainer._watchdog[0] == first, "and is still the one the drainer will cancel on a clean exit"
    else:
        assert publisher.cancelled == [first], "the old one goes once the new one exists"
    assert watchdogs[-1] is not None
    assert watchdogs[-1] > datetime.now(timezone.utc) + timedelta(seconds=10)


# -- 1: a resumed submit later than STAGING_TTL_S ---------------------------------------------------------------


async def test_a_resumed_submit_is_judged_by_its_own_attempt_not_the_first_one(configure):
    """The first attempt began two hours ago and stopped; the key's retry comes now. A drainer that meets a
    chunk of the retry while it is still enqueueing must wait for it, not discard it as abandoned."""
    from shared.batches import Manifest, State, items_digest, new_attempt, new_batch_id
    from shared.chunking import plan_chunks
    from shared.intake import encode_item
    from shared.submit import claim, prepare, store
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

    report = await Drainer(services, queue).run()

    assert report.waiting == 1, "the retry's chunk is put back until the retry commits"
    assert await services.storage.queue(queue).peek_messages() == [], "hidden for a moment, not deleted"
    assert (await services.storage.queue(queue).get_queue_properties()).approximate_message_count == 1
