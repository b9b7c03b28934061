"""The marks a submit leaves on its lanes (`shared.engine.lane_queues`), and the tenant cap it checks first.

A lane's mark moves before any chunk is stored (so a lane a drainer recorded quiet is looked at again, whatever
happens to the submit after) and again after the commit and the index write, naming the committed batch (so a
drainer admits its first chunk with no manifest read). A tenant new to the app is refused past MAX_TENANTS.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from shared.core.errors import LimitExceeded, StorageError
from shared.core.lanes import Lane, queue_suffix
from shared.engine import lane_queues
from shared.services import Services

log = logging.getLogger("shared.intake.submit")  # its records read as the submit's, as they always have


async def check_tenant_room(services: Services, tenant: str) -> None:
    """A tenant new to the app only while fewer than MAX_TENANTS have lanes (one listing per submit that names
    a tenant). Two new tenants submitting at the same moment may both pass: the bound is MAX_TENANTS plus the
    submits racing it."""
    settings = services.settings
    known = await lane_queues.tenants(services, settings.partition_queues())
    if queue_suffix(tenant) not in known and len(known) >= settings.max_tenants:
        raise LimitExceeded(
            f"{len(known)} tenants have lanes, the most MAX_TENANTS allows: submit as one of them, "
            "or ask the operator to raise MAX_TENANTS",
            limit="MAX_TENANTS",
            maximum=settings.max_tenants,
            status=409,
            tenant=tenant,
        )


async def premark_lanes(services: Services, lanes: Sequence[str], tenant: str) -> None:
    """Before any chunk is stored: move each lane's mark, so a lane its drainer recorded as quiet
    (`shared.engine.lane_queues`) is looked at again, whatever happens to this submit after (not best effort:
    a failure fails the submit before it stored anything)."""
    for name in lanes:
        await services.storage.ensure_queue(name)
    await asyncio.gather(*(lane_queues.mark(services, name, tenant=tenant, storing=True) for name in lanes))


async def mark_lanes(
    services: Services, lanes: Sequence[Lane], committed: tuple[str, str] | None, accepted_ms: int
) -> None:
    """After the commit (a chunk taken before it would only be put back): a drainer that found a lane empty
    takes it again when it sees the mark move. `committed`: the batch and attempt, once the batch is indexed
    (None if its index write failed: a drainer then admits it by its manifest, and indexes it). Best effort: the
    mark before storing already moved, so a drainer looking at the lane admits the batch after reading its
    manifest.

    A drainer of this process at work on a lane's partition hears of its mark at once (`Services.lane_news`), as
    its next listing would find it: a newcomer's batch is not left waiting for that listing, its ListQueues and
    the receives, settles and deletes of another tenant's backlog the drainer's event loop runs meanwhile."""
    try:
        marks = await asyncio.gather(
            *(lane_queues.mark(services, lane.name, committed, accepted_ms, tenant=lane.tenant) for lane in lanes)
        )
    except StorageError as e:
        log.warning("could not mark lanes %s: %s", ",".join(lane.name for lane in lanes), e)
        return
    for lane, mark in zip(lanes, marks, strict=True):
        heard = services.lane_news.get(lane.partition)
        if heard is not None:
            heard(lane, mark)
