"""Tenants and priority, the order alone (pure): lane names, tenants taking turns page by page, high lanes' bursts, when
an emptied or a new lane is looked at again, the lane watch's count, and the places going round robin by lane."""

from __future__ import annotations

import asyncio

from shared.core import lanes
from shared.core.lanes import HIGH_BURST, Lane, LaneOrder, Priority
from shared.engine.lane_watch import LANE_POLL_MESSAGES, LANE_POLL_S, LaneWatch

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


async def test_a_place_freed_as_its_next_waiter_is_cancelled_goes_to_the_one_after_it() -> None:
    """A waiting chunk's task cancelled (its session ended, a hung call timed out) has its future cancelled at once
    but takes itself out of the line only when its task next runs; a place freed in between went to that cancelled
    future (`InvalidStateError` in the releasing chunk, `limits` seed 101) instead of to the chunk after it."""
    from shared.engine.fair_slots import FairSlots

    slots = FairSlots(1, "q")
    started: list[str] = []
    leave = asyncio.Event()

    async def chunk(name: str) -> None:
        async with slots.place("q-t-a"):
            started.append(name)
            await leave.wait()

    async def holder() -> None:
        async with slots.place("q-t-a"):
            started.append("holder")
            await leave.wait()
            victim.cancel()  # cancelled, and the place freed, before the victim's task runs again

    holding = asyncio.create_task(holder())
    await asyncio.sleep(0)
    victim = asyncio.create_task(chunk("victim"))
    behind = asyncio.create_task(chunk("behind"))
    await asyncio.sleep(0)
    assert started == ["holder"], "the others wait for the one place"
    leave.set()
    await holding  # on the old code: InvalidStateError here, from set_result on the cancelled future
    await behind
    assert isinstance((await asyncio.gather(victim, return_exceptions=True))[0], asyncio.CancelledError)
    assert started == ["holder", "behind"]
    assert slots.free == 1
