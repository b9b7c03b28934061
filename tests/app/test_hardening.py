"""Issue 26, the engine's and the lanes' items: what a lane costs idle and per session, tenant ids as real
systems have them, the tenant cap, bounded express pages, handler limits that do not stall extra drainers,
overload back-off as stated, and the HIGH_BURST bound for chunk starts.

On the real Azurite with the recording publisher (see conftest) where storage is involved; pure otherwise.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace

import pytest

from shared import api
from shared.core.events import Reason
from shared.engine import lane_queues, serve
from shared.engine.drainer import Drainer
from shared.engine.fair_slots import FairSlots
from shared.engine.limits import drainers_fed
from shared.engine.overload import OverloadPause
from shared.engine.report import DrainReport
from shared.engine.wakeups import Wakeups
from shared.handlers import ChunkContext
from shared.ops.reports import read_batch_status, read_queue_status
from shared.router import route
from shared.services import Services
from shared.store.storage import write_json
from shared.watch.fallback import poll
from shared.watch.inspect import inspect
from tests.app import handlers
from tests.app.conftest import RecordingPublisher, another_instance, drain_all
from tests.app.test_lanes import ndjson, submit_to

RECORD = "tests.app.handlers:record"

# -- item 1: what a lane costs ---------------------------------------------------------------------------------------


async def test_idle_lanes_cost_a_session_and_a_fallback_look_no_per_lane_call(configure) -> None:
    """30 tenants' lanes, drained empty once: then a session and a fallback look cost the same as with one lane
    (a listing and a read of the quiet record), not a receive, peek or depth read per lane."""
    services = configure(publisher=RecordingPublisher(), HANDLER=RECORD)
    for i in range(30):
        await submit_to(services, f"t{i}", 1, tenant=f"tenant{i}")
    first = await drain_all(services)
    assert first.items_ok == 30
    idle = await drain_all(services, reason=Reason.WATCHDOG)
    calls = idle.transactions
    assert calls.get("queue.GetMessages", 0) == 0, calls
    assert calls.get("queue.PeekMessages", 0) == 0, calls
    assert calls.get("queue.GetQueueProperties", 0) == 0, calls
    assert calls.get("queue.ListQueues", 0) <= 2, calls  # before the session, and after its release
    before = dict(services.counter.totals())
    action, depth = await inspect(services, services.settings.work_queue, deadline=1e12)
    spent = {k: n - before.get(k, 0) for k, n in services.counter.totals().items() if n != before.get(k, 0)}
    assert (action, depth) == ("idle", 0)
    assert spent.get("queue.GetQueueProperties", 0) == 0, spent
    assert sum(spent.values()) <= 3, spent  # a listing, the quiet record, (the state container once)


async def test_a_look_records_the_empty_lanes_a_drainer_left_out_so_the_next_look_reads_none(configure) -> None:
    """A drainer's write of the quiet record is best effort (two tries against other drainers' writes): in
    `make bench-tenants` about half of 2,000 lanes were left out, and every look read their depth again, idle
    (1,005 reads a tick). A look that reads a lane empty at its mark records it: the next look reads none."""
    services = configure(publisher=RecordingPublisher(), HANDLER=RECORD)
    for i in range(12):
        await submit_to(services, f"t{i}", 1, tenant=f"tenant{i}")
    assert (await drain_all(services)).items_ok == 12
    state = services.storage.container(services.settings.state_container)
    partition = services.settings.work_queue
    await state.delete_blob(lane_queues.quiet_blob(partition))  # as if every write of it had lost its race

    async def look() -> dict[str, int]:
        before = dict(services.counter.totals())
        assert await inspect(services, partition, deadline=1e12) == ("idle", 0)
        return {k: n - before.get(k, 0) for k, n in services.counter.totals().items() if n != before.get(k, 0)}

    first, second = await look(), await look()
    assert first.get("queue.GetQueueMetadata", 0) >= 12, first
    assert first.get("blob.PutBlob", 0) == 1, f"one write of the record: {first}"
    assert second.get("queue.GetQueueMetadata", 0) == 0, f"the next look read lanes again: {second}"
    assert second.get("blob.PutBlob", 0) == 0, second
    assert len(await lane_queues.read_quiet(state, partition)) >= 12


async def test_a_quiet_lane_is_drained_again_once_a_submit_marks_it(configure) -> None:
    services = configure(publisher=RecordingPublisher(), HANDLER=RECORD)
    await submit_to(services, "a", 2, tenant="acme")
    assert (await drain_all(services)).items_ok == 2
    await submit_to(services, "b", 3, tenant="acme")
    again = await drain_all(services)
    assert again.items_ok == 3


async def test_tenant_ids_like_uuids_and_hyphenated_names_are_accepted_and_shown_as_given(configure) -> None:
    services = configure(publisher=RecordingPublisher(), HANDLER=RECORD)
    tenant = str(uuid.uuid4())
    long_name = "Acme-Corp.eu_west:" + "x" * 60
    answers = []
    for who in (tenant, long_name):
        answer = await api.submit_batch(ndjson("u", 2), {"content-type": "application/x-ndjson", "x-tenant": who})
        assert answer.status == 202, answer.body
        assert answer.body["tenant"] == who
        answers.append(answer)
    tenants = {t["tenant"]: t["depth"] for t in (await read_queue_status(services))["tenants"]}
    assert tenants[tenant] == 1, tenants  # one chunk each
    assert tenants[long_name] == 1, tenants
    assert (await drain_all(services)).items_ok == 4
    status = await read_batch_status(services, answers[0].body["batch_id"])
    assert status["status"] == "completed"


async def test_past_max_tenants_a_new_tenant_is_a_json_409_naming_the_setting_and_nothing_is_stored(configure) -> None:
    services = configure(publisher=RecordingPublisher(), HANDLER=RECORD, MAX_TENANTS="2")
    for who in ("acme", "bolt"):
        answer = await api.submit_batch(ndjson(who, 1), {"content-type": "application/x-ndjson", "x-tenant": who})
        assert answer.status == 202, answer.body
    refused = await api.submit_batch(ndjson("c", 1), {"content-type": "application/x-ndjson", "x-tenant": "corp"})
    assert refused.status == 409, refused.body
    assert refused.body["error"]["limit"] == "MAX_TENANTS"
    assert refused.body["error"]["maximum"] == 2
    known = await api.submit_batch(ndjson("a", 1), {"content-type": "application/x-ndjson", "x-tenant": "acme"})
    assert known.status == 202, "a tenant that has lanes goes on"
    lanes = {lane["tenant"] for lane in (await read_queue_status(services))["partitions"][0]["lanes"]}
    assert "corp" not in lanes


# -- item 8: express pages are bounded -------------------------------------------------------------------------------


@pytest.mark.slow
async def test_express_pages_never_make_a_drainer_hold_more_than_twice_its_receivers_pages(configure) -> None:
    """A tenant with a backlog that keeps submitting: every new mark used to start another page of the backlog."""
    services = configure(
        publisher=RecordingPublisher(), HANDLER=RECORD, CHUNK_MAX_ITEMS="1", CHUNK_CONCURRENCY="2", RECEIVERS="1"
    )
    await submit_to(services, "big", 600, tenant="acme")

    async def slow(context: ChunkContext) -> None:
        await asyncio.sleep(0.02)

    handlers.on_chunk.append(slow)
    drainer = Drainer(services, services.settings.work_queue, budget_s=6)
    held: list[int] = []

    async def keep_submitting() -> None:
        for i in range(40):
            await submit_to(services, f"s{i}", 1, tenant="acme")
            held.append(drainer.report.messages - drainer.lanes.handled)
            await asyncio.sleep(0.05)

    feeder = asyncio.create_task(keep_submitting())
    await drainer.run()
    await feeder
    bound = 2 * services.settings.receivers * services.settings.receive_batch
    assert held
    assert max(held) <= bound, f"held up to {max(held)} messages (bound {bound})"


async def test_no_express_page_or_listing_outlives_the_session(configure) -> None:
    services = configure(publisher=RecordingPublisher(), HANDLER=RECORD)
    await submit_to(services, "a", 3, tenant="acme")
    drainer = Drainer(services, services.settings.work_queue)
    await drainer.run()
    assert drainer._lease is None
    assert not drainer._receivers or all(t.done() for t in drainer._receivers)
    assert drainer.lanes._listing is None or drainer.lanes._listing.done()


# -- item 9: handler limits ------------------------------------------------------------------------------------------


def test_recruiting_stops_at_the_drainers_the_limits_can_feed() -> None:
    assert drainers_fed(items_per_s=None, in_flight=None, chunk_items=250, horizon_s=15) is None
    assert drainers_fed(items_per_s=None, in_flight=3, chunk_items=250, horizon_s=15) == 3
    assert drainers_fed(items_per_s=10, in_flight=None, chunk_items=250, horizon_s=15) == 1
    assert drainers_fed(items_per_s=5000, in_flight=8, chunk_items=250, horizon_s=15) == 8


async def test_a_deep_queue_recruits_no_more_drainers_than_handler_max_in_flight(configure) -> None:
    publisher = RecordingPublisher()
    services = configure(
        publisher=publisher, HANDLER=RECORD, HANDLER_MAX_IN_FLIGHT="2", MAX_DRAINERS_PER_QUEUE="16", SCALE_OUT_DEPTH="1"
    )
    await submit_to(services, "deep", 400)
    wakeups = Wakeups(services, services.settings.work_queue, 0, DrainReport("q", 0, "submitted"), lambda: 100.0)
    await wakeups.maybe_scale_out()
    slots = [e.slot for e, _ in publisher.events if e.reason is Reason.SCALE_OUT]
    assert slots == [1], slots


@pytest.mark.slow
async def test_a_drainer_with_no_share_of_the_in_flight_limit_receives_nothing(configure) -> None:
    """Two leasing drainers and HANDLER_MAX_IN_FLIGHT 1: the one ranked past the limit used to receive a page
    and hold it hidden while it waited without a deadline."""
    services = configure(publisher=RecordingPublisher(), HANDLER=RECORD, HANDLER_MAX_IN_FLIGHT="1", CHUNK_MAX_ITEMS="1")
    await submit_to(services, "x", 200)
    gate = asyncio.Event()
    in_handler = asyncio.Event()

    async def held(context: ChunkContext) -> None:
        in_handler.set()
        await gate.wait()

    handlers.on_chunk.append(held)
    queue = services.settings.work_queue
    first = asyncio.create_task(Drainer(services, queue, slot=0, budget_s=8).run())
    await asyncio.wait_for(in_handler.wait(), 60)  # the first holds its lease and the one place, however slow
    second = await Drainer(services, queue, slot=1, budget_s=3).run()
    gate.set()
    await first
    assert second.messages == 0, second
    assert second.outcome == "starved"


# -- item 13: overload -------------------------------------------------------------------------------------------------


def test_concurrent_overloads_are_one_signal_and_pause_only_their_lane() -> None:
    pause = OverloadPause()
    assert pause.signal("q-t-a", now=10, retry_after_s=None, started=9) == 1
    for _ in range(6):  # six more chunks that were running when the pause began
        assert pause.signal("q-t-a", now=10.2, retry_after_s=None, started=9.5) <= 1
    assert pause.until("q-t-a") == 11
    assert not pause.active("q-t-b", 10.5), "another tenant goes on"
    assert pause.signal("q-t-a", now=11.5, retry_after_s=None, started=11.1) == 2  # a new signal doubles


async def test_a_chunk_always_overloaded_is_parked_with_no_skips_after_max_skips(configure) -> None:
    from shared.batch import envelope, poison
    from shared.core.errors import Overloaded
    from shared.engine.settling import MAX_SKIPS

    services = configure(publisher=RecordingPublisher(), HANDLER=RECORD)
    await submit_to(services, "o", 1)
    queue = services.storage.queue(services.settings.work_queue)
    async for message in queue.receive_messages(max_messages=1, visibility_timeout=1):
        msg = envelope.decode(str(message.content))
        header = msg.header
        for _ in range(MAX_SKIPS):
            header = envelope.skipped_header(header)
        text = envelope.encode_inline(header, envelope.encode_items(msg.items or []))
        await queue.update_message(message, pop_receipt=message.pop_receipt, content=text, visibility_timeout=0)

    async def overloaded(context: ChunkContext) -> None:
        raise Overloaded("downstream busy")

    handlers.on_chunk.append(overloaded)
    report = await drain_all(services)
    assert report.overloaded == 1
    poison_queue = services.storage.queue(services.settings.poison_queue(services.settings.work_queue))
    parked = await poison_queue.peek_messages(max_messages=5)
    assert len(parked) == 1
    chunk_text = poison.decode(str(parked[0].content)).chunk_text
    assert chunk_text is not None
    assert envelope.decode(chunk_text).header.skips == 0


# -- item 14: HIGH_BURST for chunk starts ---------------------------------------------------------------------------


async def test_a_waiting_normal_chunk_sees_at_most_high_burst_pages_of_high_chunk_starts() -> None:
    burst = 4 * 32
    slots = FairSlots(1, "q", high_burst=burst)
    starts: list[str] = []
    gate = asyncio.Event()

    async def chunk(lane: str) -> None:
        async with slots.place(lane):
            starts.append(lane)
            await asyncio.sleep(0)

    async def blocker() -> None:
        async with slots.place("q-t-a"):
            await gate.wait()

    first = asyncio.create_task(blocker())
    await asyncio.sleep(0)
    tasks = [asyncio.create_task(chunk("q-t-a"))]  # a normal chunk waits for the place
    await asyncio.sleep(0)
    tasks += [asyncio.create_task(chunk(f"q-h-t{i % 7}")) for i in range(400)]  # then a flood of high ones
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(first, *tasks)
    seen = starts.index("q-t-a")
    assert seen <= burst, f"the normal chunk saw {seen} high starts"


async def test_work_in_a_lane_recorded_quiet_is_found_by_the_timers_look_and_drained(configure) -> None:
    """A lane the quiet record holds at its current mark is skipped by drainers and looks. Should a lane hold
    messages at such a mark (a drainer recorded it quiet between a replay's two marks, and the second failed),
    only the timer's look, which trusts no quiet record, can find them: it marks the lane again and calls a
    drainer, and nothing is left behind."""
    services = configure(publisher=RecordingPublisher(), HANDLER=RECORD)
    await submit_to(services, "a", 2, tenant="acme")
    assert (await drain_all(services)).items_ok == 2
    partition = services.settings.work_queue
    await submit_to(services, "b", 3, tenant="acme")
    found = await lane_queues.listed(services, partition)
    [(name, stamp)] = [(n, s) for n, (lane, s) in found.items() if lane.tenant == "acme"]
    state = await services.storage.ensure_container(services.settings.state_container)
    await write_json(state, lane_queues.quiet_blob(partition), {"quiet": {name: stamp or ""}})

    assert (await drain_all(services)).items_ok == 0, "a lane recorded quiet at its mark is skipped"
    services.publisher.events.clear()
    outcomes = await poll(services)
    assert [o.action for o in outcomes] == ["triggered"]
    assert (await drain_all(services)).items_ok == 3, "the timer's look marked the lane again"


async def test_a_doorbell_whose_work_a_later_look_found_drained_costs_no_transaction(configure) -> None:
    """2,000 tenants' one-item submits ring 2,000 doorbells; served one at a time, each was a drain execution
    listing every lane twice (about 0.5 s each: 17 minutes of doorbells). A doorbell whose work was ready before
    a drainer's closing look at the partition began (that look found nothing visible) is covered by it: it costs
    no storage call. One whose work came after that look, or within the clock-skew margin of it, is served."""
    services = configure(publisher=RecordingPublisher(), HANDLER=RECORD)
    for i in range(3):
        await submit_to(services, f"b{i}", 1, tenant=f"tenant{i}")
    doorbells = [e for e, _ in services.publisher.events if e.reason is Reason.SUBMITTED]
    assert len(doorbells) == 3
    assert all(e.ready_ms for e in doorbells)
    assert (await drain_all(services)).items_ok == 3
    # As if they had waited 6 s behind other doorbells: their work was ready well before the drain's last look.
    waited = [replace(e, ready_ms=e.ready_ms - serve.COVER_SKEW_MS - 1000) for e in doorbells]
    # Within the skew margin, a doorbell is covered only by the look's listing of its batch's mark (issue 36 item
    # 16; tests/app/test_doorbell_flood.py): one that names no committed attempt is served.
    unnamed = [replace(e, attempt=None) for e in doorbells]
    assert [serve.covered(services, e) for e in unnamed] == [False] * 3, "within the skew margin: served"
    assert [serve.covered(services, e) for e in doorbells] == [True] * 3, "the look listed their batches' marks"
    before = dict(services.counter.totals())
    reports = [await route(services, event) for event in waited]
    assert [r.outcome for r in reports] == ["covered"] * 3
    assert services.counter.totals() == before, "a covered doorbell made a storage call"

    services.publisher.events.clear()
    await submit_to(services, "late", 2, tenant="tenant0")
    [late] = [e for e, _ in services.publisher.events if e.reason is Reason.SUBMITTED]
    report = await route(services, late)
    assert report.outcome != "covered"
    assert report.items_ok == 2, "work ready after the look is drained"
    skewed = replace(late, ready_ms=services.looked[late.queue] - serve.COVER_SKEW_MS + 1, attempt=None)
    assert not serve.covered(services, skewed), "within the skew margin of the look: served"


@pytest.mark.slow
async def test_the_timers_thorough_look_reads_every_lane_once_a_day_even_on_a_recycled_instance(configure) -> None:
    """The timer's look reads every lane's depth (the last net for a lane wrongly recorded quiet) once a day, not
    at each 6-hourly tick: 2,000 lanes cost 2,000 reads a day, not 8,000. The time of the last is kept in the
    back-off blob, so a fresh instance (a recycled one) does not read them all again."""
    services = configure(publisher=RecordingPublisher(), HANDLER=RECORD)
    for i in range(5):
        await submit_to(services, f"t{i}", 1, tenant=f"tenant{i}")
    assert (await drain_all(services)).items_ok == 5
    now_ms = int(time.time() * 1000)
    hour_ms = 3600 * 1000

    async def tick(on: Services, at_ms: int) -> dict[str, int]:
        before = dict(services.counter.totals())
        [outcome] = await poll(on, clock_ms=lambda: at_ms)
        assert outcome.action == "idle"
        return {k: n - before.get(k, 0) for k, n in services.counter.totals().items() if n != before.get(k, 0)}

    assert (await tick(services, now_ms)).get("queue.GetQueueMetadata", 0) >= 5, "the first tick reads every lane"
    for later in (6, 12, 18):
        spent = await tick(services, now_ms + later * hour_ms)
        assert spent.get("queue.GetQueueMetadata", 0) == 0, (later, spent)
    recycled = another_instance(services)
    spent = await tick(recycled, now_ms + 20 * hour_ms)
    assert spent.get("queue.GetQueueMetadata", 0) == 0, f"a fresh instance read every lane again: {spent}"
    assert (await tick(recycled, now_ms + 24 * hour_ms)).get("queue.GetQueueMetadata", 0) >= 5, "a day later"


@pytest.mark.slow
async def test_a_scale_out_check_reads_no_lane_recorded_quiet(configure) -> None:
    """A drainer's scale-out check reads the backlog's depth; it read every lane it knew, quiet or not: with
    1,000 tenants, 1,001 reads every 5 s while one tenant's backlog drained (bench.tenants: 12,483 in 117 s)."""
    services = configure(
        publisher=RecordingPublisher(),
        HANDLER=RECORD,
        CHUNK_MAX_ITEMS="1",
        MAX_DRAINERS_PER_QUEUE="4",
        SCALE_OUT_DEPTH="1",
    )
    for i in range(20):
        await submit_to(services, f"q{i}", 1, tenant=f"quiet{i}")
    assert (await drain_all(services)).items_ok == 20  # ... and recorded quiet at their marks
    await submit_to(services, "deep", 40, tenant="deep")
    report = await drain_all(services)
    assert report.items_ok == 40
    assert services.publisher.reasons().count("scale-out") >= 1, "no scale-out check ran"
    reads = report.transactions.get("queue.GetQueueMetadata", 0)
    assert reads <= 6, f"{reads} depth reads: the quiet lanes were read ({report.transactions})"


@pytest.mark.slow
async def test_one_listing_that_wakes_many_lanes_gives_their_express_pages_the_room_once(configure) -> None:
    """Each express page was given the whole room left of RECEIVERS x RECEIVE_BATCH, not yet counting the pages
    started beside it: one listing that woke five lanes started five pages of 4 beside the receiver's page of 4,
    and the drainer held 24 messages against a bound of 16 (found by the simulation, random seed 423)."""
    services = configure(
        publisher=RecordingPublisher(), HANDLER=RECORD, CHUNK_MAX_ITEMS="1", CHUNK_CONCURRENCY="64", RECEIVERS="2",
        RECEIVE_BATCH="4",
    )  # fmt: skip
    await submit_to(services, "big", 4, tenant="acme")
    gate = asyncio.Event()
    in_handler = asyncio.Event()

    async def held_back(context: ChunkContext) -> None:
        in_handler.set()
        await gate.wait()

    handlers.on_chunk.append(held_back)
    drainer = Drainer(services, services.settings.work_queue, budget_s=10)
    held: list[int] = []

    async def watch() -> None:
        while not gate.is_set():
            held.append(drainer.report.messages - drainer.lanes.handled)
            await asyncio.sleep(0.005)

    run = asyncio.create_task(drainer.run())
    await asyncio.wait_for(in_handler.wait(), 30)
    await asyncio.sleep(0.2)  # past the listing its first page made due: the next comes about a second later
    monitor = asyncio.create_task(watch())
    await asyncio.gather(*(submit_to(services, f"n{i}", 8, tenant=f"new{i}") for i in range(5)))
    await asyncio.sleep(2.0)
    gate.set()
    await monitor
    await run
    bound = 2 * services.settings.receivers * services.settings.receive_batch
    assert max(held) > services.settings.receive_batch, f"no express page was taken: {max(held)}"
    assert max(held) <= bound, f"held up to {max(held)} messages (bound {bound})"
