"""A drainer's claim on HANDLER_MAX_IN_FLIGHT, against real storage: a count that gives a place up admits no chunk
into it while its write is under way, since the write hands that place to another drainer (the simulator found two
handler calls in flight under a limit of 1: platform seed 206 on an earlier main)."""

from __future__ import annotations

import asyncio
from typing import Any

from shared.core import layout
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
