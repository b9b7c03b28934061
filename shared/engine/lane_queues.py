"""The lanes of a partition as storage sees them (`shared.core.lanes` is the pure part).

A lane's queue is created by the first submit to it and never deleted (a deleted queue's name cannot be
reused for a while, and a drainer may be receiving from it). Every submit marks each lane it wrote to (queue
metadata, one transaction per lane and batch) after its commit, so a drainer that found the lane empty sees the
mark move at its next listing and takes it again.
"""

from __future__ import annotations

import time
import uuid

from shared.core.errors import ResourceMissing
from shared.core.lanes import Lane, mark_text, parse
from shared.services import Services
from shared.store.storage import translated

MARK = "submitted"


async def listed(services: Services, partition: str) -> dict[str, tuple[Lane, str | None]]:
    """Every lane of `partition` with its submit mark: one ListQueues (a page holds 5,000 names)."""
    found: dict[str, tuple[Lane, str | None]] = {}
    async with translated(f"list the lanes of {partition}"):
        async for queue in services.storage.queues.list_queues(name_starts_with=partition, include_metadata=True):
            lane = parse(partition, str(queue.name))
            if lane is not None:
                found[lane.name] = (lane, (queue.metadata or {}).get(MARK))
    if partition not in found:  # the shared lane always exists for the engine, created or not
        found[partition] = (Lane(partition), None)
    return found


async def mark(
    services: Services, name: str, committed: tuple[str, str] | None = None, accepted_ms: int | None = None
) -> None:
    """Say a submit wrote to the lane `name` (after its messages are stored). `committed`: the batch id and the
    attempt it committed at `accepted_ms`, which a drainer that lists the mark takes as read
    (`shared.core.lanes.committed_in`), so the batch's first chunk needs no manifest read."""
    stamp = mark_text(accepted_ms or int(time.time() * 1000), uuid.uuid4().hex[:8], committed)
    async with translated(f"mark {name}"):
        await services.storage.queue(name).set_queue_metadata({MARK: stamp})


async def depth(services: Services, name: str) -> int:
    """Approximate message count, invisible messages included (one transaction); 0 for a missing queue."""
    try:
        async with translated(f"depth of {name}"):
            properties = await services.storage.queue(name).get_queue_properties()
    except ResourceMissing:
        return 0
    return int(properties.approximate_message_count or 0)


async def depths(services: Services, partition: str) -> dict[Lane, int]:
    """Each lane's approximate depth: one listing plus one read per lane."""
    return {lane: await depth(services, name) for name, (lane, _) in (await listed(services, partition)).items()}


async def any_visible(services: Services, names: list[str]) -> bool:
    """Whether any of these lanes has a message visible now (one peek per lane, stopping at the first)."""
    for name in names:
        try:
            async with translated(f"peek {name}"):
                if await services.storage.queue(name).peek_messages(max_messages=1):
                    return True
        except ResourceMissing:
            continue
    return False
