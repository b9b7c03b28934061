"""The fallback poller, through function_app's registered timer function, on the real Azurite."""

from __future__ import annotations

import asyncio
import time

import pytest
from azure.functions.timer import TimerRequest

from shared.core import layout
from shared.core.events import Reason
from shared.intake.submit import submit
from shared.ops.reports import read_batch_status
from shared.store.leases import DrainLease
from shared.telemetry import metering
from shared.watch.fallback import poll
from tests.app.conftest import RecordingPublisher, another_instance, drain_all

NDJSON = b'{"id":"f-1","amount":"5.00","currency":"EUR","author":"a","distributor":"d"}\n'


async def submit_without_trigger(services, body: bytes = NDJSON) -> str:
    done = await submit(
        services, body, content_type="application/x-ndjson", content_encoding=None, idempotency_key=None
    )
    assert done.trigger == "deferred"
    return done.manifest.batch_id


async def test_the_fallback_finds_work_that_no_trigger_announced(configure, app_functions):
    publisher = RecordingPublisher(down=True)
    services = configure(publisher=publisher)
    batch_id = await submit_without_trigger(services)
    publisher.down = False

    await app_functions["fallback_poll"](TimerRequest(past_due=False))

    # (The process that deferred the trigger also tries it again a few seconds later: not counted here.)
    fallback = [(e.reason, e.queue) for e, _ in publisher.events if e.reason is not Reason.SUBMITTED]
    queue = services.settings.work_queue
    assert fallback == [(Reason.FALLBACK, queue), (Reason.LOOK, queue)], "a drainer called, and the look chain armed"
    await drain_all(services, reason=Reason.FALLBACK)
    assert (await read_batch_status(services, batch_id))["status"] == "completed"


async def test_with_service_bus_down_the_fallback_drains_the_queue_itself(configure, app_functions):
    services = configure(publisher=RecordingPublisher(down=True))
    batch_id = await submit_without_trigger(services)

    await app_functions["fallback_poll"](TimerRequest(past_due=True))

    status = await read_batch_status(services, batch_id)
    assert status["status"] == "completed"
    assert status["trigger"] == "deferred"


async def test_the_fallback_leaves_a_queue_alone_while_a_drainer_holds_it(configure):
    publisher = RecordingPublisher(down=True)
    services = configure(publisher=publisher)
    await submit_without_trigger(services)
    publisher.down = False
    state = await services.storage.ensure_container(services.settings.state_container)
    lease = DrainLease(state, services.settings.work_queue, 0, lease_s=15)
    assert await lease.acquire()
    try:
        outcomes = await poll(services)
    finally:
        await lease.release()

    assert [o.action for o in outcomes] == ["busy"]
    assert publisher.reasons() == ["look"], "no drainer called; the look chain the deferred submit could not arm"


@pytest.mark.slow
async def test_an_idle_queue_backs_off_and_writes_its_state_only_when_the_interval_changes(configure):
    services = configure(
        publisher=RecordingPublisher(), BACKOFF_FLOOR_MS="100", BACKOFF_CEILING_MS="800", BACKOFF_JITTER="0"
    )
    actions = []
    with metering.tally() as counted:
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline:
            actions.extend(o.action for o in await poll(services))
            await asyncio.sleep(0.02)

    looks = actions.count("idle")
    assert 5 <= looks <= 10, f"100 ms doubling to an 800 ms ceiling looks about 6 times in 3.5 s, not {looks}"
    assert actions.count("not-due") > looks, "ticks in between cost nothing"
    # The first due look reads the lane's depth and records it quiet (shared.engine.lane_queues.depths): the
    # looks after it read none, until a submit moves its mark.
    assert counted["queue.GetQueueMetadata"] == 1, "one depth read, at the first due look"
    state = services.backoff.known()[services.settings.work_queue]
    assert state.interval_ms == 800
    writes = counted["blob.PutBlob"]
    assert writes == 3 + 1, "written at each change (200, 400, 800), never at the floor or the ceiling; the record once"


async def test_back_off_state_survives_a_restart_through_its_blob(configure):
    services = configure(
        publisher=RecordingPublisher(), BACKOFF_FLOOR_MS="100", BACKOFF_CEILING_MS="100000", BACKOFF_JITTER="0"
    )
    queue = services.settings.work_queue
    deadline = time.monotonic() + 10
    while services.backoff.known().get(queue) is None or services.backoff.known()[queue].interval_ms < 800:
        assert time.monotonic() < deadline, "the interval should reach 800 ms within a second or two"
        await poll(services)
        await asyncio.sleep(0.02)

    restarted = another_instance(services)
    state = await restarted.backoff.load(queue, now_ms=0)
    await restarted.storage.close()
    assert state.interval_ms == 800
    assert state.is_due(0), "after a restart the queue is looked at once, at once"
    blobs = [b.name async for b in services.storage.container(services.settings.state_container).list_blobs()]
    assert layout.backoff_blob(queue) in blobs


async def test_a_deferral_makes_the_fallback_look_at_its_queue_at_its_next_tick(configure):
    """Push drains kept the queue empty, so the fallback's back-off sat at its ceiling (30 minutes); a batch
    accepted while Service Bus is down must not wait for it."""
    from shared.core.backoff import PollState

    publisher = RecordingPublisher(down=True)
    services = configure(publisher=publisher)
    queue = services.settings.work_queue
    ceiling = services.backoff.policy.ceiling_ms
    now_ms = int(time.time() * 1000)
    await services.backoff.save(queue, PollState(interval_ms=ceiling, next_due_ms=now_ms + ceiling, idle_count=20))
    assert [o.action for o in await poll(services)] == ["not-due"]

    batch_id = await submit_without_trigger(services)
    outcomes = await poll(services)

    assert [o.action for o in outcomes] == ["drained"], "looked at once, and drained here with Service Bus down"
    assert (await read_batch_status(services, batch_id))["status"] == "completed"


@pytest.mark.slow
async def test_a_deferred_trigger_is_published_again_as_soon_as_service_bus_answers(configure):
    publisher = RecordingPublisher(down=True)
    services = configure(publisher=publisher)
    batch_id = await submit_without_trigger(services)
    publisher.down = False  # Service Bus is back

    for _ in range(100):  # the doorbell, then its look chain's first look (published a moment later)
        if len(publisher.events) >= 2 and not services.deferred.pending():
            break
        await asyncio.sleep(0.1)

    assert [(e.reason, e.batch_id) for e, _ in publisher.events] == [(Reason.SUBMITTED, batch_id), (Reason.LOOK, None)]
    assert services.deferred.pending() == []


async def test_one_partitions_storage_failure_does_not_end_the_tick_for_the_others(configure, monkeypatch):
    from shared.core.errors import StorageUnavailable
    from shared.watch import fallback

    services = configure(publisher=RecordingPublisher(), WORK_QUEUE_PARTITIONS="3")
    first, second, third = services.settings.partition_queues()
    real = fallback.inspect

    async def inspect(services, queue, deadline, **kwargs):  # the storage outage reaches one partition's queue only
        if queue == second:
            raise StorageUnavailable(f"inspect {queue}", "storage is down (injected)")
        return await real(services, queue, deadline, **kwargs)

    monkeypatch.setattr(fallback, "inspect", inspect)
    outcomes = await poll(services)
    assert [(o.queue, o.action) for o in outcomes] == [(first, "idle"), (second, "storage-error"), (third, "idle")]


async def test_a_lane_listing_that_fails_after_its_receiver_was_cancelled_is_still_retrieved(configure, monkeypatch):
    import gc

    from shared.core.errors import StorageUnavailable
    from shared.core.lanes import LaneOrder
    from shared.engine import lane_queues
    from shared.engine.lane_watch import LaneWatch

    services = configure(publisher=RecordingPublisher())
    queue = services.settings.work_queue

    async def listed(services, queue):  # storage answers slowly, then fails (an outage; injected)
        await asyncio.sleep(0.05)
        raise StorageUnavailable("list lanes", "storage is down (injected)")

    monkeypatch.setattr(lane_queues, "listed", listed)
    unretrieved: list[dict] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: unretrieved.append(context))
    try:
        watch = LaneWatch(
            services, queue, LaneOrder(), time.monotonic,
            committed=lambda *_: None, woke=lambda *_: None, mid_drain=lambda: False,
        )  # fmt: skip
        receiver = asyncio.ensure_future(watch.list_once())
        await asyncio.sleep(0.01)
        receiver.cancel()  # the drain ends while the listing is under way
        await asyncio.sleep(0.1)
        del watch, receiver  # the drainer is gone: its listing task is collected
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert [c.get("message") for c in unretrieved] == []
