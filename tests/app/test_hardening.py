"""Issue 26, the engine's bounds: bounded express pages (each reserving its room when it starts), handler limits
that do not stall extra drainers, overload back-off as stated, and the HIGH_BURST bound for chunk starts. What a
lane costs, the looks and the tenant cap are in test_lane_costs.py.

On the real Azurite with the recording publisher (see conftest) where storage is involved; pure otherwise.
"""

from __future__ import annotations

import asyncio

import pytest

from shared.core.events import Reason
from shared.engine.drainer import Drainer
from shared.engine.fair_slots import FairSlots
from shared.engine.limits import drainers_fed
from shared.engine.overload import OverloadPause
from shared.engine.report import DrainReport
from shared.engine.wakeups import Wakeups
from shared.handlers import ChunkContext
from tests.app import handlers
from tests.app.conftest import RecordingPublisher, drain_all
from tests.app.tenants import RECORD, submit_to

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
