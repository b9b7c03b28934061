"""Tenants and priority: lanes on the real Azurite, taken in the order `shared.core.lanes` promises.

Service Bus is the recording publisher (see conftest); the drain engine, the submit path and the API are the
app's own against real storage.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from shared import api
from shared.core import lanes
from shared.core.lanes import HIGH_BURST, Lane, LaneOrder, Priority
from shared.engine.drainer import Drainer
from shared.engine.lane_watch import LANE_POLL_MESSAGES, LANE_POLL_S, LaneWatch
from shared.handlers import ChunkContext
from shared.intake.submit import submit
from shared.ops.reports import read_batch_status, read_queue_status
from shared.services import Services
from tests.app import handlers
from tests.app.conftest import RecordingPublisher

RECORD = "tests.app.handlers:record"


def ndjson(prefix: str, n: int) -> bytes:
    return "\n".join(json.dumps({"id": f"{prefix}-{i}"}) for i in range(n)).encode()


async def submit_to(services: Services, prefix: str, n: int, tenant: str = "default", priority: str = "normal") -> str:
    done = await submit(
        services,
        ndjson(prefix, n),
        content_type="application/x-ndjson",
        content_encoding=None,
        idempotency_key=None,
        lane=Lane("", tenant, priority),
    )
    return done.manifest.batch_id


def recording_order() -> list[str]:
    """Each chunk's batch id as the handler is called, in order."""
    seen: list[str] = []

    async def hook(context: ChunkContext) -> None:
        seen.append(context.batch_id)

    handlers.on_chunk.append(hook)
    return seen


# -- the order, pure ------------------------------------------------------------------------------------------------


def listing(*found: Lane, stamp: str | None = "s0") -> dict[str, tuple[Lane, str | None]]:
    return {lane.name: (lane, stamp) for lane in found}


def test_lane_names_parse_back_and_never_claim_another_partitions_queues() -> None:
    for lane in (
        Lane("work-1"),
        Lane("work-1", "acme"),
        Lane("work-1", "acme", "high"),
        Lane("work-1", "default", "high"),
    ):
        assert lanes.parse("work-1", lane.name) == lane
    assert Lane("work-1", "acme").name == "work-1-t-acme"
    assert Lane("work-1", "default", "high").name == "work-1-h-default"
    for other in ("work-1-poison", "work-10", "work-10-t-acme", "work-1-t-", "work-1-x-acme", "work-1-t-default"):
        assert lanes.parse("work-1", other) is None, other
    assert lanes.parse("work-10", "work-10-t-acme") == Lane("work-10", "acme")


def test_tenants_take_turns_page_by_page() -> None:
    order = LaneOrder()
    order.listed(listing(Lane("q"), Lane("q", "a"), Lane("q", "b")), now=0)
    taken = [order.next(0) for _ in range(6)]
    assert taken == ["q", "q-t-a", "q-t-b", "q", "q-t-a", "q-t-b"]


def test_high_lanes_go_first_but_a_normal_lane_gets_a_page_after_every_burst() -> None:
    order = LaneOrder()
    order.listed(listing(Lane("q"), Lane("q", priority=Priority.HIGH)), now=0)
    taken = [order.next(0) for _ in range(3 * (HIGH_BURST + 1))]
    assert taken[:HIGH_BURST] == ["q-h-default"] * HIGH_BURST
    # The stated bound: among any HIGH_BURST + 1 pages in a row, at least one is the waiting normal lane's.
    for start in range(len(taken) - HIGH_BURST):
        assert "q" in taken[start : start + HIGH_BURST + 1]
    order.emptied("q", now=0)
    assert [order.next(0) for _ in range(HIGH_BURST + 2)] == ["q-h-default"] * (HIGH_BURST + 2)  # nothing waits


def test_an_emptied_lane_waits_for_a_submits_mark_or_if_it_gave_work_its_recheck() -> None:
    order = LaneOrder(recheck_s=5)
    order.listed(listing(Lane("q"), Lane("q", "a"), stamp="s1"), now=0)
    order.emptied("q-t-a", now=1)
    assert {order.next(1) for _ in range(3)} == {"q"}
    assert order.listed(listing(Lane("q"), Lane("q", "a"), stamp="s1"), now=2) == []  # no new mark: still empty
    assert order.listed(listing(Lane("q", "a"), stamp="s2"), now=2) == ["q-t-a"]
    assert order.next(2) == "q-t-a"
    order.gave("q-t-a")  # a retry of it may come back: looked at again after recheck_s
    order.emptied("q-t-a", now=3)
    order.emptied("q", now=3)  # it gave nothing this session: only its mark moving brings it back
    assert order.next(7.9) is None
    assert [order.next(8), order.next(8)] == ["q-t-a", "q-t-a"]
    order.emptied("q-t-a", now=8)
    assert order.next(1e9) == "q-t-a"
    assert order.next(1e9) is not None


def test_mid_drain_a_new_lane_waits_for_its_submits_mark() -> None:
    order = LaneOrder(recheck_s=5)
    order.listed(listing(Lane("q")), now=0)
    assert order.listed(listing(Lane("q")) | listing(Lane("q", "b"), stamp=None), now=1, mid_drain=True) == []
    assert order.next(1) == "q"
    assert order.next(1) == "q"  # b's submit has not committed: its chunks would only be put back
    assert order.listed(listing(Lane("q", "b"), stamp="m1"), now=2, mid_drain=True) == ["q-t-b"]
    assert order.next(2) == "q-t-b"


def test_mid_drain_a_mark_before_storing_that_follows_another_wakes_the_lane() -> None:
    """Submits overlapping: the first one's commit mark may have come and gone between two listings, overwritten
    by the next one's mark before storing, while its chunks wait in the lane. It used to wait recheck_s."""
    order = LaneOrder(recheck_s=5)
    b = Lane("q", "b")
    assert order.listed(listing(Lane("q"), b, stamp="m1"), now=0, mid_drain=True) == ["q", "q-t-b"]
    order.emptied("q", now=0)
    order.emptied("q-t-b", now=0)
    first = lanes.mark_text(1, "n1", storing=True)
    assert order.listed(listing(b, stamp=first), now=1, mid_drain=True) == []  # a submit storing: not yet
    second = lanes.mark_text(2, "n2", storing=True)
    assert order.listed(listing(b, stamp=second), now=2, mid_drain=True) == ["q-t-b"]
    assert order.next(2) == "q-t-b"


def test_the_lane_watch_counts_chunks_as_they_start_not_as_their_results_return() -> None:
    """A listing is due once LANE_POLL_MESSAGES chunks started since the last: chunks end in bursts (their
    results go out in group commits), so counting ends left a newcomer's lane unlisted for up to a second."""
    now = [0.0]
    watch = LaneWatch(
        None,  # type: ignore[arg-type]  # nothing here touches storage
        "q",
        LaneOrder(),
        lambda: now[0],
        committed=lambda *_: None,
        woke=lambda *_: None,
        mid_drain=lambda: True,
    )
    watch.listed_at = 0.0
    now[0] = LANE_POLL_S
    assert not watch.due()
    watch.started += LANE_POLL_MESSAGES  # none of them has ended yet
    assert watch.due()


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


async def test_places_go_round_robin_by_lane_and_a_lane_with_nothing_in_service_never_waits() -> None:
    from shared.engine.fair_slots import FairSlots

    slots = FairSlots(2, "q")
    order: list[str] = []
    release = asyncio.Event()

    async def chunk(lane: str, name: str) -> None:
        async with slots.place(lane):
            order.append(name)
            await release.wait()

    busy = [asyncio.create_task(chunk("q-t-a", f"a{i}")) for i in range(6)]  # a's page: 2 start, 4 wait
    await asyncio.sleep(0)
    assert order == ["a0", "a1"]
    newcomer = asyncio.create_task(chunk("q-t-b", "b0"))
    second = asyncio.create_task(chunk("q-t-b", "b1"))
    await asyncio.sleep(0)
    assert order == ["a0", "a1", "b0"], "b had nothing in service: its first chunk took a place at once"
    release.set()
    await asyncio.gather(*busy, newcomer, second)
    # b's second chunk waited like any other, and got the first place that came free after a's turn.
    assert order.index("b1") <= 4, order
    assert slots.free == 2


def test_a_mark_names_the_batch_and_attempt_its_submit_committed_and_nothing_else() -> None:
    assert lanes.committed_in(lanes.mark_text(1_700_000_000_000, "ab12cd34", ("f" * 32, "0a1b2c3d4e5f"))) == (
        "f" * 32,
        "0a1b2c3d4e5f",
        1_700_000_000_000,
    )
    assert lanes.committed_in(lanes.mark_text(1_700_000_000_000, "ab12cd34")) is None  # a replay's mark
    assert lanes.committed_in(None) is None
    assert lanes.committed_in("1-2-batch id-x") is None, "only what a submit writes"


async def test_a_doorbell_names_its_committed_attempt_so_a_batch_no_mark_names_needs_no_manifest_read(
    configure,
) -> None:
    """A tenant's submits overlap: its lane's mark names only the latest batch, and the drainer read the others'
    manifests (and wrote their index entries) before their first handler call: hundreds of ms behind a deep
    backlog (BENCHMARKS.md, fairness). Each doorbell names the attempt its submit committed and indexed."""
    from shared.core.events import TriggerEvent
    from shared.engine.serve import serve
    from shared.store.ended import read_manifest
    from tests.app.conftest import another_instance

    publisher = RecordingPublisher()
    services = configure(publisher=publisher, HANDLER=RECORD)
    first = await submit_to(services, "m", 3, tenant="acme")
    await submit_to(services, "n", 3, tenant="acme")  # the lane's mark now names this one only
    doorbell = next(event for event, _ in publisher.events if event.batch_id == first)
    container = services.storage.container(services.settings.batches_container)
    assert doorbell.attempt == (await read_manifest(container, first))[0].attempt
    fresh = another_instance(services)  # a drainer process that has read no manifest
    try:
        report = await serve(fresh, TriggerEvent.decode(doorbell.encode()))  # as Service Bus delivers it
    finally:
        await fresh.storage.close()

    assert report.items_ok == 6
    # One read: the partition's quiet record; neither batch's manifest (and so no index entry written again).
    assert report.transactions.get("blob.GetBlob", 0) == 1, report.transactions
    assert (await read_batch_status(services, first))["status"] == "completed"


async def test_a_doorbell_that_names_another_attempt_costs_a_manifest_read_never_the_batch_s_chunks(configure) -> None:
    """Service Bus is not where a batch's state lives: a doorbell naming an attempt that is not the committed one
    (a forged or corrupted event) must not make the drainer drop the batch's chunks as a replaced attempt's."""
    from dataclasses import replace

    from shared.core.events import TriggerEvent
    from shared.engine.serve import serve
    from tests.app.conftest import another_instance

    publisher = RecordingPublisher()
    services = configure(publisher=publisher, HANDLER=RECORD)
    batch_id = await submit_to(services, "w", 3, tenant="acme")
    await submit_to(services, "x", 3, tenant="acme")  # the lane's mark names this one: the first is the doorbell's
    doorbell = next(event for event, _ in publisher.events if event.batch_id == batch_id)
    wrong = replace(doorbell, attempt="0bad0bad0bad")
    fresh = another_instance(services)
    try:
        report = await serve(fresh, TriggerEvent.decode(wrong.encode()))
    finally:
        await fresh.storage.close()

    assert (report.items_ok, report.stale) == (6, 0), report
    assert report.transactions.get("blob.GetBlob", 0) == 2, "the quiet record, and the first batch's manifest"
    assert (await read_batch_status(services, batch_id))["status"] == "completed"


async def test_a_drainer_takes_a_marked_batch_as_committed_without_reading_its_manifest(configure) -> None:
    """A new tenant's first chunk waits for no manifest read: the listing that found its lane carried it."""
    from tests.app.conftest import another_instance, drain_all

    services = configure(publisher=RecordingPublisher(), HANDLER=RECORD)
    batch_id = await submit_to(services, "m", 3, tenant="acme")
    fresh = another_instance(services)  # a drainer process that has read no manifest
    try:
        report = await drain_all(fresh)
    finally:
        await fresh.storage.close()

    assert report.items_ok == 3
    # One read: the partition's quiet record (`shared.engine.lane_queues`), not the batch's manifest.
    assert report.transactions.get("blob.GetBlob", 0) == 1, report.transactions
    assert (await read_batch_status(services, batch_id))["status"] == "completed"
