"""A drain session against the real Azurite: cancelled mid-chunk it loses nothing, one instance holds a queue
slot's lease, a deep queue recruits drainers, the watchdog is scheduled and cancelled, a delayed retry's wake-up,
and a session out of time publishing its continuation.

Service Bus is the recording publisher here (see conftest): these tests assert exactly which trigger events the
engine emits.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import datetime, timezone
from typing import Any

import pytest

from shared.core.events import Reason
from shared.engine.drainer import Drainer
from shared.ops.reports import read_batch_status
from tests.app import handlers
from tests.app.conftest import (
    RecordingPublisher,
    another_instance,
    drain_all,
    drain_once_due,
    queue_depth,
    retrying_once,
    the_retry_due,
)
from tests.app.sales import result_positions, submit_ids


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
