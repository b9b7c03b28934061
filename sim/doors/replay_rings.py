"""A replay announces what it puts back (issue 26 item 5): each partition's doorbell rings as the first chunk goes
back to it, not once the call is over, so a drainer takes that chunk up within seconds even while a paced replay
goes on putting others back for up to a minute.

Checked after each synchronous replay that put chunks back (`sim.doors.replayers`): the first chunk it put back to
each partition has a handler call starting within RING_BOUND_S (plus the bus's delay, a thread's start and one call
ahead of it) of when it went back, taken at its latest: the call's start plus one pace interval per chunk the call
took before it (an unpaced call's answer, since its storage requests may each take seconds). Add a slowest call and
a thread's start for each call the partition's drainers started meanwhile before it: the chunk waits its turn behind
the work it was received with, or a lane served ahead of it, as any visible chunk does (`docs/api.md` promises the
doorbell rung as it goes back, not a place ahead of the queue). A chunk of a batch cancelled or expired by then has
no call (it is discarded). Excused where nothing could take it up in time whatever rang: Service Bus losing
messages (the doorbell may be lost), a handler call hanging in that partition, begun before or after the chunk went
back (its session holds the partition past its budget; a chunk behind it waits), hung calls holding every
instance, or, with HANDLER_MAX_IN_FLIGHT set, a call hung anywhere (its drainer's claim may hold all of the limit).
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from shared.batch.chunking import partition_of
from sim.checks.promises import RESTART_S
from sim.clock import EPOCH_S
from sim.host import FUNCTION_TIMEOUT_S

World = Any  # `sim.world.World`

LATE = "a replayed chunk taken up late"
RING_BOUND_S = 10.0  # a doorbell's delivery, a drain session's start, its lane listing and receive


def watch(world: World, began: float, answer: dict[str, Any]) -> None:
    """After a replay answered 200 (`answer`), having begun at `began` (virtual s)."""
    chunks = answer.get("chunks") or []
    if not chunks:
        return
    rate = answer.get("rate")
    gap = 1.0 / float(rate) if rate else 0.0
    scenario = world.scenario
    bound = RING_BOUND_S + scenario.bus_delay_s + scenario.thread_start_s[1] + scenario.handler_s[1]
    first: dict[str, tuple[str, int, float, float]] = {}
    for taken, chunk in enumerate(chunks):
        batch_id, index = chunk.get("batch_id"), chunk.get("chunk")
        if batch_id is None or index is None:
            continue
        partition = partition_for(world, batch_id, int(index))
        # Its earliest and latest times back: the call paces every chunk it took before this one, and perhaps
        # those it left parked too (a second copy of one it put back).
        earliest = began + gap * taken
        back = began + gap * (taken + len(answer.get("skipped") or []))
        if not gap:  # unpaced: its reads may be slow (seconds each), so it is back by the answer at the latest
            back = world.now_s()
        first.setdefault(partition, (batch_id, int(index), earliest, back))
    for partition, (batch_id, index, earliest, back) in first.items():
        world.spawn(check(world, partition, batch_id, index, earliest, back, bound), "replay ring check")


async def check(world: World, partition: str, batch_id: str, index: int, earliest: float, back: float,
                bound: float) -> None:  # fmt: skip
    scenario, due = world.scenario, back + bound
    while True:
        await asyncio.sleep(max(0.0, due - world.now_s()))
        started = [
            c.started_s for c in world.calls if (c.batch_id, c.chunk) == (batch_id, index) and c.started_s >= earliest
        ]
        if any(at <= due for at in started) or excused(world, partition, back, bound, due) or closed(world, batch_id):
            return
        # The drainer at work in the partition takes the chunk up in its turn: each call that came first (a chunk
        # received before it, or of a lane served ahead of it) may take the slowest handler time and a thread start.
        ahead = [
            c for c in world.calls
            if earliest <= c.started_s <= due and (c.batch_id, c.chunk) != (batch_id, index)
            and partition_for(world, c.batch_id, c.chunk) == partition
        ]  # fmt: skip
        # A sync handler's calls share their host's threads across partitions: the other partitions' sync calls
        # that took a thread first hold it as long, a pool's worth at a time (replay seed 989: one thread a host).
        pooled = [
            c for c in world.calls
            if earliest <= c.started_s <= due and c.kind == "sync" and c not in ahead
            and (c.batch_id, c.chunk) != (batch_id, index)
        ]  # fmt: skip
        turns = len(ahead) + -(-len(pooled) // max(1, scenario.threads))
        later = back + bound + turns * (scenario.handler_s[1] + scenario.thread_start_s[1])
        # A call that never ended holds its partition until its function's timeout, if it began before the chunk
        # was due and that timeout came after the chunk went back: the chunk is due a bound after that (replay seed
        # 924: a call hung at 25.7 s held work-0 until 325.4 s, and the chunk put back at 315 s came at 327.5 s).
        held_until = [
            c.started_s + FUNCTION_TIMEOUT_S for c in world.calls
            if c.ended_s is None and c.started_s <= due and c.started_s + FUNCTION_TIMEOUT_S > back
            and partition_for(world, c.batch_id, c.chunk) == partition
        ]  # fmt: skip
        later = max([later, *(end + RESTART_S + bound for end in held_until)])
        if later <= due:
            break
        due = later
    world.violate(
        f"chunk {index} of batch {batch_id[:8]}, put back to {partition} by a replay at {back:.0f} s at the latest, "
        f"had no handler call within {due - back:.0f} s ({len(ahead)} call(s) ahead of it in its partition; first: "
        f"{min(started, default=None)}) ({LATE})"
    )


def excused(world: World, partition: str, back: float, bound: float, due: float) -> bool:
    """A call hung before the chunk was `due`, whether before or after it went back `back` (a chunk received
    with it, or taken up first, waits behind it: replay seed 690), and still hanging."""
    scenario, settings = world.scenario, world.settings
    if scenario.bus_lose:
        return True
    earliest = back + bound - FUNCTION_TIMEOUT_S  # a call hung before this has ended with its function
    hung = [c for c in world.calls if c.ended_s is None and earliest <= c.started_s <= due]
    if any(partition_for(world, c.batch_id, c.chunk) == partition for c in hung):
        return True
    # With HANDLER_MAX_IN_FLIGHT set, a call hung anywhere holds its drainer's claim on the limit, which can be
    # all of it, so the other partitions' drainers wait for it too (as `sim.sessions` excuses their sessions).
    limit = settings.handler_max_in_flight
    return len({c.instance for c in hung}) >= len(world.live()) or bool(limit and hung)


def closed(world: World, batch_id: str) -> bool:
    """Cancelled or expired since: the chunk is taken up and discarded, with no handler call (rightly)."""
    manifest = world.manifest(batch_id) or {}
    expires = manifest.get("expires_at")
    return bool(manifest.get("ended")) or (
        expires is not None and datetime.fromisoformat(expires).timestamp() - EPOCH_S <= world.now_s()
    )


def partition_for(world: World, batch_id: str, chunk: int) -> str:
    """The partition queue a batch's chunk went to (`shared.intake.submit`: round-robin from a per-batch offset)."""
    queues = world.settings.partition_queues()
    offset = int(batch_id[:8], 16) % len(queues)
    return str(queues[partition_of(chunk, offset=offset, partitions=len(queues))])
