"""A drainer's claim on HANDLER_MAX_IN_FLIGHT, against real storage: a count that gives a place up admits no chunk
into it while its write is under way, since the write hands that place to another drainer (the simulator found two
handler calls in flight under a limit of 1: platform seed 206 on an earlier main)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shared.core import layout
from shared.core.errors import SessionEnding
from shared.engine import limits
from shared.engine.limits import HandlerLimits
from shared.store.leases import DrainLease


async def test_a_count_that_gives_a_place_up_admits_no_chunk_into_it_while_it_writes(configure, monkeypatch):
    services = configure()
    state = await services.storage.ensure_container(services.settings.state_container)
    queue = services.settings.work_queue
    now = [0.0]  # the count is not due again on this clock: only the counts the test starts run

    def clock() -> float:
        return now[0]

    # Slot 1 counts alone first and claims the one place; slot 0, which ranks first, then leases too.
    late = DrainLease(state, queue, 1, lease_s=60)
    early = DrainLease(state, queue, 0, lease_s=60)
    assert await late.acquire()
    giver = HandlerLimits(state, layout.lease_blob(queue, 1), items_per_s=None, in_flight=1, clock=clock)
    taker = HandlerLimits(state, layout.lease_blob(queue, 0), items_per_s=None, in_flight=1, clock=clock)
    admitted: list[str] = []
    try:
        await giver.count()
        assert giver.capacity == 1
        assert await early.acquire()

        # The giver's next count yields its place to slot 0; its write of the allocation waits for the test.
        write = limits.write_json
        writing, go = asyncio.Event(), asyncio.Event()

        async def held_write(*args: Any, **kwargs: Any) -> str:
            writing.set()
            await go.wait()
            return await write(*args, **kwargs)

        monkeypatch.setattr(limits, "write_json", held_write)
        counting = asyncio.create_task(giver.count())
        await writing.wait()

        async def run_a_chunk() -> None:
            async with giver.admit(3):
                admitted.append("giver")
                await asyncio.Event().wait()  # the handler call runs until the test ends

        chunk = asyncio.create_task(run_a_chunk())
        await asyncio.sleep(0)  # one turn of the loop: admit asks no storage when its place is free
        go.set()
        await counting
        monkeypatch.setattr(limits, "write_json", write)
        assert giver.capacity == 0

        await taker.count()
        if taker.capacity:
            admitted.append("taker")
        assert admitted == ["taker"], "two chunks in the handler under HANDLER_MAX_IN_FLIGHT=1"
        chunk.cancel()
        await asyncio.gather(chunk, return_exceptions=True)
    finally:
        await early.release()
        await late.release()


async def test_a_chunk_waiting_for_a_share_gives_up_once_its_session_ends(configure):
    """A chunk received before its drainer's claim went to a drainer ranking first waits for a place; once its
    session starts no more calls (its budget spent) it gives up (SessionEnding: the message goes back for the next
    session) instead of waiting for the other drainer's sessions to end (the simulator's `limits` seed 15: a
    session 23 s past its budget and margin while the first partition's drainers followed one another)."""
    services = configure()
    state = await services.storage.ensure_container(services.settings.state_container)
    queue = services.settings.work_queue
    first, second = DrainLease(state, queue, 0, lease_s=60), DrainLease(state, queue, 1, lease_s=60)
    assert await first.acquire()
    assert await second.acquire()
    holder = HandlerLimits(state, layout.lease_blob(queue, 0), items_per_s=None, in_flight=1, clock=lambda: 0.0)
    waiter = HandlerLimits(state, layout.lease_blob(queue, 1), items_per_s=None, in_flight=1, clock=lambda: 0.0)
    ending = asyncio.Event()
    try:
        await holder.count()
        await waiter.count()
        assert (holder.capacity, waiter.capacity) == (1, 0)

        async def a_chunk() -> None:
            async with waiter.admit(3, ending.is_set):
                raise AssertionError("admitted with no share of HANDLER_MAX_IN_FLIGHT")

        chunk = asyncio.create_task(a_chunk())
        await asyncio.sleep(0)  # it waits for a place (the claim holds none)
        assert not chunk.done()
        ending.set()  # the session's budget is spent
        with pytest.raises(SessionEnding):
            await asyncio.wait_for(chunk, timeout=30)  # a guard: it wakes within REFRESH_S of the budget's end
    finally:
        await first.release()
        await second.release()


async def _count_held(
    monkeypatch: pytest.MonkeyPatch, claim: HandlerLimits, *, held_at: str
) -> tuple[asyncio.Event, asyncio.Task[None]]:
    """Start a count of `claim` held until `go` is set: its read of the allocation reaches storage only then
    (`held_at="read"`), or its listing of the leases is read at once and answered only then (`"listing"`). Returns
    `go` and the count, once it is held (later reads and listings are plain)."""
    read, listing = limits.read_json, claim.state.list_blobs
    held, go = asyncio.Event(), asyncio.Event()

    async def late_read(*args: Any, **kwargs: Any) -> Any:
        held.set()
        await go.wait()
        return await read(*args, **kwargs)

    def late_listing(*args: Any, **kwargs: Any) -> Any:
        async def answered_late() -> Any:
            found = [blob async for blob in listing(*args, **kwargs)]
            held.set()
            await go.wait()
            for blob in found:
                yield blob

        return answered_late()

    if held_at == "read":
        monkeypatch.setattr(limits, "read_json", late_read)
    else:
        monkeypatch.setattr(claim.state, "list_blobs", late_listing)
    count = asyncio.create_task(claim.count())
    await held.wait()
    monkeypatch.setattr(limits, "read_json", read)
    monkeypatch.setattr(claim.state, "list_blobs", listing)
    return go, count


async def test_a_count_answered_late_takes_back_no_place_a_later_count_gave_up(configure, monkeypatch):
    """A drainer's count that storage answers late must not end after a later count of the same drainer and take the
    place that count gave up back from what it read (the simulator's `limits` seed 119:
    a count's read answered 15 s late raised its claim to 1 again without a write, after the drainer's next count
    had yielded the place to a drainer ranking first, which took it: two handler calls in flight under a limit of
    1). One count of a drainer at a time. Since counts read the allocation before they list the leases (seeds 712
    and 983, below), the late answer that shows it is the listing's."""
    services = configure()
    state = await services.storage.ensure_container(services.settings.state_container)
    queue = services.settings.work_queue
    late = DrainLease(state, queue, 1, lease_s=60)
    early = DrainLease(state, queue, 0, lease_s=60)
    assert await late.acquire()
    giver = HandlerLimits(state, layout.lease_blob(queue, 1), items_per_s=None, in_flight=1, clock=lambda: 0.0)
    taker = HandlerLimits(state, layout.lease_blob(queue, 0), items_per_s=None, in_flight=1, clock=lambda: 0.0)
    try:
        await giver.count()
        assert giver.capacity == 1

        # The giver counts again while it leases alone; storage answers that count's listing of the leases late.
        go, slow = await _count_held(monkeypatch, giver, held_at="listing")

        # Meanwhile slot 0, which ranks first, leases; the giver counts once more, and the taker counts.
        assert await early.acquire()
        await giver.count()
        await taker.count()
        go.set()  # the late listing's answer arrives
        await slow
        assert (giver.capacity or 0) + (taker.capacity or 0) <= 1, (
            f"claims of {giver.capacity} and {taker.capacity} place(s) under HANDLER_MAX_IN_FLIGHT=1"
        )
    finally:
        await early.release()
        await late.release()


async def test_a_session_gives_its_claim_back_without_waiting_for_a_late_answer(configure, monkeypatch):
    """Giving the claim back is best effort and the session holds its lease until it is done: a write of the
    allocation that storage answers late is given up after RELEASE_TIMEOUT_S (the simulator's `limits` seed 2: the
    allocation's read and write answered 15 s late each, a session 75 s long for a budget of 10 s and a margin of
    60)."""
    services = configure()
    state = await services.storage.ensure_container(services.settings.state_container)
    queue = services.settings.work_queue
    lease = DrainLease(state, queue, 0, lease_s=60)
    assert await lease.acquire()
    claim = HandlerLimits(state, layout.lease_blob(queue, 0), items_per_s=None, in_flight=1, clock=lambda: 0.0)
    try:
        await claim.count()
        assert claim.capacity == 1
        writing, answered = asyncio.Event(), asyncio.Event()

        async def late_write(*args: Any, **kwargs: Any) -> str:
            writing.set()
            await answered.wait()  # storage never answers
            raise AssertionError("answered")

        monkeypatch.setattr(limits, "write_json", late_write)
        monkeypatch.setattr(limits, "RELEASE_TIMEOUT_S", 0.5)
        releasing = asyncio.create_task(claim.release())
        await writing.wait()
        # A guard only: the release gives up RELEASE_TIMEOUT_S after it began.
        await asyncio.wait_for(releasing, timeout=30)
        assert not answered.is_set()
    finally:
        await lease.release()


async def _two_claims_then_slot_1_left(state: Any, queue: str) -> tuple[DrainLease, HandlerLimits]:
    """Slots 0 and 1 each claim one of HANDLER_MAX_IN_FLIGHT=2; slot 1's session ends with its lease released but
    its entry left in the allocation (its release gave up, RELEASE_TIMEOUT_S). Slot 0's lease and claim."""
    first, second = DrainLease(state, queue, 0, lease_s=60), DrainLease(state, queue, 1, lease_s=60)
    assert await first.acquire()
    assert await second.acquire()
    claim = HandlerLimits(state, layout.lease_blob(queue, 0), items_per_s=None, in_flight=2, clock=lambda: 0.0)
    left = HandlerLimits(state, layout.lease_blob(queue, 1), items_per_s=None, in_flight=2, clock=lambda: 0.0)
    await claim.count()
    await left.count()
    assert (claim.capacity, left.capacity) == (1, 1)
    await second.release()
    return first, claim


async def test_a_count_answered_late_keeps_the_claim_of_a_drainer_that_leased_meanwhile(configure, monkeypatch):
    """A count whose read of the allocation storage answers late must not drop the claim of a drainer that leased
    while it waited: the simulator's `limits` seeds 712 and 983 listed the leases, then had the read answered 10 s
    late, while the slot's next session took its entry as it stood; the count dropped it as a released lease's and
    took both places: three handler calls in flight under HANDLER_MAX_IN_FLIGHT=2. Here the read reaches storage
    after the slot's next session wrote its claim, so only a listing newer than the read sees that lease."""
    services = configure()
    state = await services.storage.ensure_container(services.settings.state_container)
    queue = services.settings.work_queue
    first, claim = await _two_claims_then_slot_1_left(state, queue)
    again = DrainLease(state, queue, 1, lease_s=60)
    newcomer = HandlerLimits(state, layout.lease_blob(queue, 1), items_per_s=None, in_flight=2, clock=lambda: 0.0)
    try:
        # The request reaches storage late: it reads what was written meanwhile.
        go, slow = await _count_held(monkeypatch, claim, held_at="read")

        # Meanwhile slot 1 leases again and counts: its slot's entry says one place.
        assert await again.acquire()
        await newcomer.count()
        go.set()  # the late read's answer arrives
        await slow
        assert (claim.capacity or 0) + (newcomer.capacity or 0) <= 2, (
            f"claims of {claim.capacity} and {newcomer.capacity} place(s) under HANDLER_MAX_IN_FLIGHT=2"
        )
    finally:
        await again.release()
        await first.release()


async def test_a_session_takes_its_slots_old_entry_over_by_a_write(configure, monkeypatch):
    """A session that finds its slot's entry left by an earlier session (whose release gave up) writes it as its
    own: a count of another drainer that read and listed before it leased, and writes after, must then fail on the
    ETag instead of dropping that entry and taking its place."""
    services = configure()
    state = await services.storage.ensure_container(services.settings.state_container)
    queue = services.settings.work_queue
    first, claim = await _two_claims_then_slot_1_left(state, queue)
    again = DrainLease(state, queue, 1, lease_s=60)
    newcomer = HandlerLimits(state, layout.lease_blob(queue, 1), items_per_s=None, in_flight=2, clock=lambda: 0.0)
    try:
        write = limits.write_json
        writing, go = asyncio.Event(), asyncio.Event()

        async def held_write(*args: Any, **kwargs: Any) -> str:
            writing.set()
            await go.wait()
            return await write(*args, **kwargs)

        monkeypatch.setattr(limits, "write_json", held_write)
        slow = asyncio.create_task(claim.count())  # slot 1 not leased: its entry dropped, both places claimed
        await writing.wait()
        monkeypatch.setattr(limits, "write_json", write)

        assert await again.acquire()
        await newcomer.count()
        go.set()  # the held write reaches storage
        await slow
        assert (claim.capacity or 0) + (newcomer.capacity or 0) <= 2, (
            f"claims of {claim.capacity} and {newcomer.capacity} place(s) under HANDLER_MAX_IN_FLIGHT=2"
        )
    finally:
        await again.release()
        await first.release()
