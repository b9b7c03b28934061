"""The lanes of a partition as storage sees them (`shared.core.lanes` is the pure part).

A lane's queue is created by the first submit to it and never deleted (storage queues have no conditional
delete: a submit storing into a lane as it is deleted would lose its messages). Every submit marks each lane it
writes to (queue metadata, one transaction per lane) before it stores, and again after its commit, naming the
batch; a replay marks the lanes it wrote to. So a lane whose mark has not moved since it was found empty is
still empty: the partition's quiet record (`lanes/<partition>.json` in the state container, written by its
drainers) says which lanes were found empty at which mark, and nobody receives from, peeks at or reads the
depth of a lane the record holds. An idle lane costs nothing; the listing that shows every mark is one
transaction for up to 5,000 lanes.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
import uuid

from azure.storage.blob.aio import ContainerClient

from shared.core.errors import PreconditionFailed, ResourceConflict, ResourceMissing, StorageError
from shared.core.lanes import DEFAULT_TENANT, Lane, mark_text, named, parse, queue_suffix
from shared.services import Services
from shared.store.storage import read_json, translated, write_json

log = logging.getLogger("shared.engine.drainer")

MARK = "submitted"
TENANT = "tenant"  # the tenant id itself, for a lane named by its hash
QUIET_PREFIX = "lanes/"
HASHED_NAME = re.compile(r"-[th]x-[0-9a-f]{23}$")

Found = dict[str, tuple[Lane, str | None]]


async def listed(services: Services, partition: str) -> Found:
    """Every lane of `partition` with its submit mark: one ListQueues (a page holds 5,000 names)."""
    found: Found = {}
    async with translated(f"list the lanes of {partition}"):
        async for queue in services.storage.queues.list_queues(name_starts_with=partition, include_metadata=True):
            lane = parse(partition, str(queue.name))
            if lane is not None:
                metadata = queue.metadata or {}
                found[lane.name] = (named(lane, metadata.get(TENANT)), metadata.get(MARK))
    if partition not in found:  # the shared lane always exists for the engine, created or not
        found[partition] = (Lane(partition), None)
    return found


async def mark(
    services: Services,
    name: str,
    committed: tuple[str, str] | None = None,
    accepted_ms: int | None = None,
    *,
    tenant: str | None = None,
    storing: bool = False,
) -> str:
    """Say a submit (or a replay) writes to the lane `name`; answers the mark written. `committed`: the batch id
    and the attempt it committed at `accepted_ms`, which a drainer that lists the mark takes as read
    (`shared.core.lanes.committed_in`), so the batch's first chunk needs no manifest read. `tenant`: the id the
    mark keeps (read from the old mark when not given, for a lane named by a hash). `storing`: a submit's mark
    before it stores (`shared.core.lanes.storing`)."""
    stamp = mark_text(accepted_ms or int(time.time() * 1000), uuid.uuid4().hex[:8], committed, storing=storing)
    queue = services.storage.queue(name)
    if tenant is None and HASHED_NAME.search(name):
        with contextlib.suppress(ResourceMissing):
            async with translated(f"read the mark of {name}"):
                tenant = ((await queue.get_queue_properties()).metadata or {}).get(TENANT)
    metadata = {MARK: stamp} | ({TENANT: tenant} if tenant is not None and tenant != DEFAULT_TENANT else {})
    async with translated(f"mark {name}"):
        await queue.set_queue_metadata(metadata)
    return stamp


async def depth(services: Services, name: str) -> int:
    """Approximate message count, invisible messages included (one transaction); 0 for a missing queue."""
    return (await _depth_and_mark(services, name))[0]


async def _depth_and_mark(services: Services, name: str) -> tuple[int, str | None]:
    """Approximate message count, invisible messages included, and the lane's mark, in one transaction."""
    try:
        async with translated(f"depth of {name}"):
            properties = await services.storage.queue(name).get_queue_properties()
    except ResourceMissing:
        return 0, None
    return int(properties.approximate_message_count or 0), (properties.metadata or {}).get(MARK)


async def depths(
    services: Services,
    partition: str,
    state: ContainerClient | None = None,
    *,
    trust_quiet: bool = True,
    record: bool = False,
) -> dict[Lane, int]:
    """Each lane's approximate depth: one listing, then, with the partition's quiet record (`state`: one read),
    one read per lane the record does not hold (a quiet lane is 0 without a read, unless not `trust_quiet`);
    without it, one per lane. `record` (a look's): a lane read empty, hidden messages counted, at the mark it was
    listed with is added to the quiet record (one write, `record_quiet`), so an idle app reads each empty lane
    once, not at every look, also when the drainer that emptied it could not write the record."""
    found = await listed(services, partition)
    read = await read_quiet_versioned(state, partition) if state is not None else ({}, None)
    depth_of: dict[Lane, int] = {}
    empty: dict[str, str] = {}
    for name, (lane, stamp) in found.items():
        if trust_quiet and read[0].get(name) == (stamp or ""):
            depth_of[lane] = 0
            continue
        depth_of[lane], mark = await _depth_and_mark(services, name)
        if depth_of[lane] == 0 and mark == stamp:  # the record is written only if this adds to it
            empty[name] = stamp or ""
    if record and empty and state is not None:
        await record_quiet(state, partition, empty, set(found), read)
    return depth_of


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


# -- the quiet record ----------------------------------------------------------------------------------------------


def quiet_blob(partition: str) -> str:
    return f"{QUIET_PREFIX}{partition}.json"


async def read_quiet(state: ContainerClient, partition: str) -> dict[str, str]:
    """Lane name: the mark it was last found empty at ("" for none). Best effort: unreadable means none."""
    return (await read_quiet_versioned(state, partition))[0]


async def read_quiet_versioned(state: ContainerClient, partition: str) -> tuple[dict[str, str], str | None]:
    try:
        doc, etag = await read_json(state, quiet_blob(partition))
    except ResourceMissing:
        return {}, None
    except StorageError as e:
        log.info("quiet record of %s not read (every lane is looked at): %s", partition, e)
        return {}, None
    quiet = doc.get("quiet") if isinstance(doc, dict) else None
    if not isinstance(quiet, dict):
        return {}, etag
    return {str(k): str(v) for k, v in quiet.items() if isinstance(v, str)}, etag


async def confirmed_empty(services: Services, name: str, stamp: str | None) -> bool:
    """Whether the lane holds no message at all, hidden ones included, and still carries `stamp` (one read; a
    missing queue carries no mark)."""
    count, mark = await _depth_and_mark(services, name)
    return count == 0 and mark == stamp


async def record_quiet(
    state: ContainerClient,
    partition: str,
    found_empty: dict[str, str],
    lanes: set[str],
    read: tuple[dict[str, str], str | None],
) -> None:
    """Add lanes confirmed empty (name: mark) to the partition's quiet record as `read` (its content and ETag),
    dropping lanes no longer listed (`lanes`): one write; if another drainer wrote it since, one more read and
    write. Best effort: a lane left out is received from once more."""
    quiet, etag = read
    for _ in range(2):
        merged = {n: m for n, m in quiet.items() if n in lanes} | found_empty
        if merged == quiet:
            return
        try:
            await write_json(state, quiet_blob(partition), {"quiet": merged}, etag=etag, create_only=etag is None)
            return
        except (PreconditionFailed, ResourceConflict):
            quiet, etag = await read_quiet_versioned(state, partition)
        except StorageError as e:
            log.info("quiet record of %s not written (its lanes are looked at once more): %s", partition, e)
            return


# -- tenants -------------------------------------------------------------------------------------------------------


async def tenants(services: Services, partitions: list[str]) -> set[str]:
    """Every tenant with a lane in these partitions, by its lanes' name part (`shared.core.lanes.queue_suffix`):
    one listing of the work queue's name prefix (one transaction for up to 5,000 queues)."""
    prefix = min(partitions, key=len)
    found: set[str] = set()
    async with translated(f"list the lanes of {prefix}"):
        async for queue in services.storage.queues.list_queues(name_starts_with=prefix):
            for partition in partitions:
                lane = parse(partition, str(queue.name))
                if lane is not None and lane.tenant != DEFAULT_TENANT:
                    found.add(queue_suffix(lane.tenant))
    return found
