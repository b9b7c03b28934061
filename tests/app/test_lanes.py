"""Tenants and priority: lanes on the real Azurite, taken in the order `shared.core.lanes` promises.

Service Bus is the recording publisher (see conftest); the drain engine, the submit path and the API are the
app's own against real storage. The order alone is tested pure in test_lane_order.py; the marks and doorbells
that name a committed attempt in test_lane_marks.py.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from shared import api
from shared.core.lanes import HIGH_BURST
from shared.engine.drainer import Drainer
from shared.handlers import ChunkContext
from shared.ops.reports import read_batch_status, read_queue_status
from tests.app import handlers
from tests.app.conftest import RecordingPublisher
from tests.app.tenants import RECORD, ndjson, submit_to


def recording_order() -> list[str]:
    """Each chunk's batch id as the handler is called, in order."""
    seen: list[str] = []

    async def hook(context: ChunkContext) -> None:
        seen.append(context.batch_id)

    handlers.on_chunk.append(hook)
    return seen


# -- on the real stack ----------------------------------------------------------------------------------------------


async def test_a_small_tenants_batch_is_taken_before_a_large_backlog_of_another(configure) -> None:
    services = configure(HANDLER=RECORD, CHUNK_MAX_ITEMS="1", CHUNK_CONCURRENCY="4", RECEIVERS="1")
    services.publisher = RecordingPublisher()
    big = await submit_to(services, "a", 200, tenant="acme")
    small = await submit_to(services, "b", 3, tenant="bolt")
    seen = recording_order()
    report = await Drainer(services, services.settings.work_queue).run()
    assert report.chunks_done == 203
    first_small = seen.index(small)
    # Round robin by page: the small batch's page comes right after the first page of the big one, not after
    # its 200 chunks as in one shared queue (the test of that control is below).
    assert first_small <= services.settings.receive_batch, (first_small, seen[:40])
    assert seen.count(big) == 200
    assert seen.count(small) == 3


async def test_in_one_shared_lane_the_small_batch_waits_behind_the_backlog(configure) -> None:
    """The control: without tenants, the same submits are taken in queue order."""
    services = configure(HANDLER=RECORD, CHUNK_MAX_ITEMS="1", CHUNK_CONCURRENCY="4", RECEIVERS="1")
    services.publisher = RecordingPublisher()
    await submit_to(services, "a", 200)
    small = await submit_to(services, "b", 3)
    seen = recording_order()
    await Drainer(services, services.settings.work_queue).run()
    assert seen.index(small) > 150


@pytest.mark.slow
async def test_a_tenant_arriving_mid_drain_is_found_by_the_running_drainer(configure) -> None:
    services = configure(HANDLER=RECORD, CHUNK_MAX_ITEMS="1", CHUNK_CONCURRENCY="2", RECEIVERS="1")
    services.publisher = RecordingPublisher()
    await submit_to(services, "a", 300, tenant="acme")
    seen = recording_order()
    done_at: dict[str, float] = {}

    draining = asyncio.Event()

    async def slow(context: ChunkContext) -> None:
        draining.set()
        await asyncio.sleep(0.01)  # the big tenant's drain lasts a couple of seconds
        done_at[context.batch_id] = time.monotonic()

    handlers.on_chunk.append(slow)
    drain = asyncio.create_task(Drainer(services, services.settings.work_queue).run())
    await asyncio.wait_for(draining.wait(), 60)  # mid-drain, however long the drain took to start
    submitted_at = time.monotonic()
    small = await submit_to(services, "b", 1, tenant="bolt")
    report = await drain
    assert report.sessions == 1
    assert report.chunks_done == 301
    position = seen.index(small)
    assert position < len(seen) - 100, f"taken at {position} of {len(seen)}: it waited for the backlog"
    # Relative to the backlog, not to a wall-clock bound: on a busy machine both take longer.
    waited, backlog = done_at[small] - submitted_at, max(done_at.values()) - submitted_at
    assert waited < backlog / 2, f"done {waited:.2f} s after its submit; the backlog took {backlog:.2f} s more"


@pytest.mark.slow
async def test_a_tenants_next_batch_gets_its_own_express_page_while_its_last_is_in_the_handler(configure) -> None:
    """A listing that found a lane marked again while that lane's express page was still open (its chunk in the
    handler) used to leave the new batch to the receivers, which came round to it only after their pages: here
    never, as their page cannot finish."""
    services = configure(HANDLER=RECORD, CHUNK_MAX_ITEMS="1", CHUNK_CONCURRENCY="2", RECEIVERS="1")
    services.publisher = RecordingPublisher()
    big = await submit_to(services, "a", 60, tenant="acme")
    drainer = Drainer(services, services.settings.work_queue)
    page_stuck, first_in_handler, second_handled = asyncio.Event(), asyncio.Event(), asyncio.Event()
    release, second_listed = asyncio.Event(), asyncio.Event()
    first = ""
    woke = drainer.lanes._woke

    def noting(woken: list[str], mid_drain: bool) -> None:
        if first_in_handler.is_set() and any("bolt" in lane for lane in woken):
            second_listed.set()  # the only mark bolt's lane gets after its first batch's is the second's
        woke(woken, mid_drain)

    drainer.lanes._woke = noting

    async def hook(context: ChunkContext) -> None:
        if context.batch_id == big:
            if not page_stuck.is_set():  # acme's first chunk holds a place: the receiver's page never ends
                page_stuck.set()
                await release.wait()
        elif context.batch_id == first:
            first_in_handler.set()
            await second_listed.wait()  # still in the handler (its express page open) when a listing finds it
        else:
            second_handled.set()

    handlers.on_chunk.append(hook)
    drain = asyncio.create_task(drainer.run())
    try:
        await asyncio.wait_for(page_stuck.wait(), 30)
        first = await submit_to(services, "b", 1, tenant="bolt")
        await asyncio.wait_for(first_in_handler.wait(), 30)
        await submit_to(services, "c", 1, tenant="bolt")
        await asyncio.wait_for(second_handled.wait(), 30)
    finally:
        release.set()
        report = await drain
    assert report.chunks_done == 62


@pytest.mark.slow
async def test_a_newcomer_gets_an_express_page_while_the_receivers_hold_their_whole_share(configure) -> None:
    """Behind a deep backlog and a slow handler the receivers hold RECEIVERS x RECEIVE_BATCH all the time; express
    pages took only what the receivers left of that, so a newcomer got none and waited for a receiver to come round
    after its page (seconds in `make bench-fairness-parts`). Here the receiver's page never ends while a place is
    free: the newcomer is handled only if an express page takes it."""
    services = configure(HANDLER=RECORD, CHUNK_MAX_ITEMS="1", CHUNK_CONCURRENCY="3", RECEIVERS="1", RECEIVE_BATCH="2")
    services.publisher = RecordingPublisher()
    big = await submit_to(services, "a", 20, tenant="acme")
    drainer = Drainer(services, services.settings.work_queue)
    in_handler, release, newcomer = [], asyncio.Event(), asyncio.Event()

    async def hook(context: ChunkContext) -> None:
        if context.batch_id == big:
            in_handler.append(context.batch_id)
            await release.wait()  # the receiver's whole page (2 of 2) holds places and never ends
        else:
            newcomer.set()

    handlers.on_chunk.append(hook)
    drain = asyncio.create_task(drainer.run())
    try:
        for _ in range(300):
            if len(in_handler) == 2:
                break
            await asyncio.sleep(0.1)
        assert len(in_handler) == 2, "the receiver's page is in the handler"
        assert drainer._held == drainer.hold_max(), "the receivers hold their whole share"
        await submit_to(services, "b", 1, tenant="bolt")
        await asyncio.wait_for(newcomer.wait(), 30)
        assert drainer._held <= 2 * drainer.hold_max()
    finally:
        release.set()
        report = await drain
    assert report.chunks_done == 21


async def test_high_priority_chunks_overtake_waiting_normal_ones_without_starving_them(configure) -> None:
    services = configure(HANDLER=RECORD, CHUNK_MAX_ITEMS="1", CHUNK_CONCURRENCY="1", RECEIVERS="1", RECEIVE_BATCH="4")
    services.publisher = RecordingPublisher()
    normal = await submit_to(services, "n", 40)
    high = await submit_to(services, "h", 40, priority="high")
    seen = recording_order()
    await Drainer(services, services.settings.work_queue).run()
    assert seen[:4] == [high] * 4, seen[:8]
    page = 4
    pages = [seen[i : i + page] for i in range(0, len(seen), page)]
    kinds = ["high" if p[0] == high else "normal" for p in pages]
    # At most HIGH_BURST high pages in a row while normal work waits: the bound the design states.
    run = longest = 0
    for kind in kinds:
        run = run + 1 if kind == "high" else 0
        longest = max(longest, run)
    assert longest == HIGH_BURST, kinds
    assert seen.index(normal) <= HIGH_BURST * page
    assert seen.count(high) == 40
    assert seen.count(normal) == 40


async def test_status_and_queues_show_each_tenants_backlog(configure) -> None:
    services = configure(HANDLER=RECORD, CHUNK_MAX_ITEMS="2")
    services.publisher = RecordingPublisher()
    acme = await submit_to(services, "a", 6, tenant="acme")
    await submit_to(services, "d", 2)
    await submit_to(services, "h", 4, tenant="acme", priority="high")
    status = await read_batch_status(services, acme)
    assert status["lane"] == {"tenant": "acme", "priority": "normal", "depth": 3}
    view = await read_queue_status(services)
    assert {t["tenant"]: t["depth"] for t in view["tenants"]} == {"acme": 5, "default": 1}
    (partition,) = view["partitions"]
    assert partition["depth"] == 6
    by_lane = {(lane["tenant"], lane["priority"]): lane["depth"] for lane in partition["lanes"]}
    assert by_lane == {("acme", "normal"): 3, ("acme", "high"): 2, ("default", "normal"): 1}
    await Drainer(services, services.settings.work_queue).run()
    done = await read_batch_status(services, acme)
    assert done["status"] == "completed"
    assert "depth" not in done["lane"]


@pytest.mark.parametrize(
    ("headers", "params", "named"),
    [
        ({"x-tenant": "Acme Corp"}, {}, "tenant must be"),
        ({}, {"tenant": "a" * 129}, "tenant must be"),
        ({}, {"tenant": "default!"}, "tenant must be"),
        ({"x-tenant": ""}, {}, "tenant must be"),
        ({"x-tenant": "acme"}, {"tenant": ""}, "tenant must be"),
        ({"x-priority": "urgent"}, {}, "priority must be"),
    ],
)
async def test_a_bad_tenant_or_priority_is_a_json_400_and_nothing_is_stored(configure, headers, params, named) -> None:
    services = configure(HANDLER=RECORD)
    services.publisher = RecordingPublisher()
    answer = await api.submit_batch(ndjson("x", 2), {"content-type": "application/x-ndjson", **headers}, params)
    assert answer.status == 400
    assert named in answer.body["error"]["message"]
    view = await read_queue_status(services)
    assert view["partitions"][0]["depth"] == 0
    assert services.publisher.events == []


async def test_a_tenant_given_as_header_or_query_reaches_its_lane(configure) -> None:
    services = configure(HANDLER=RECORD)
    services.publisher = RecordingPublisher()
    by_header = await api.submit_batch(
        ndjson("x", 2), {"content-type": "application/x-ndjson", "x-tenant": "acme", "x-priority": "high"}, {}
    )
    by_query = await api.submit_batch(ndjson("y", 2), {"content-type": "application/x-ndjson"}, {"tenant": "bolt"})
    # Both given: the header wins (each is checked).
    both = await api.submit_batch(
        ndjson("z", 2), {"content-type": "application/x-ndjson", "x-tenant": "acme"}, {"tenant": "bolt"}
    )
    assert (by_header.status, by_query.status, both.status) == (202, 202, 202)
    assert (both.body["tenant"], both.body["priority"]) == ("acme", "normal")
    assert (by_header.body["tenant"], by_header.body["priority"]) == ("acme", "high")
    assert (by_query.body["tenant"], by_query.body["priority"]) == ("bolt", "normal")
    lanes_seen = {
        lane["queue"]: lane["depth"] for lane in (await read_queue_status(services))["partitions"][0]["lanes"]
    }
    work = services.settings.work_queue
    assert lanes_seen == {work: 0, f"{work}-h-acme": 1, f"{work}-t-acme": 1, f"{work}-t-bolt": 1}
