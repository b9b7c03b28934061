"""Replaying parked chunks (what is parked, and how it is listed and inspected, is `shared.ops.parked`).

Nothing here receives from a poison queue (receiving hides a message from every other reader): replay uses the
index the drainers write when they park a chunk (`shared.store.poison_index`), so it costs O(1) storage calls
per chunk whatever the queue's depth.

Replay puts a parked chunk back on its work queue (its envelope already names the next generation),
marks its items as retrying again in the result record that reported them failed, rings the doorbell,
and only then deletes the poison message and its index entry. Replaying twice is harmless: the second call
finds nothing, and a replay interrupted midway re-enqueues a chunk whose second result has the same lineage
and counts once. Chunks parked by a version before the index are listed (first page) and can be inspected
there, but not replayed through the index.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from enum import Enum
from typing import Any

from shared.batch import envelope, results
from shared.core import lanes
from shared.core.errors import (
    BatchConflict,
    PreconditionFailed,
    ReplayConflict,
    ResourceMissing,
    StorageError,
    TriggerUnavailable,
)
from shared.core.events import Reason, TriggerEvent
from shared.engine import lane_queues
from shared.ops.parked import Parked, from_entry
from shared.services import Services
from shared.store import ended, poison_index
from shared.store.result_store import list_entries
from shared.store.storage import NEVER_EXPIRES, read_json, translated, write_json
from shared.watch import lookout

log = logging.getLogger(__name__)
DEFAULT_LIMIT = 1000  # parked chunks one replay call takes at most, unless it asks for fewer
MAX_REPLAY_S = 60  # every replay call stops taking chunks after this long (a paced one: what its rate allows)

MARK_ATTEMPTS = 5  # reads of a parent record that keeps changing under a replay before giving up


async def replay(
    services: Services,
    *,
    batch_id: str | None = None,
    message_ids: set[str] | None = None,
    limit: int = DEFAULT_LIMIT,
    rate: float | None = None,
    exclude: frozenset[str] = frozenset(),
    window_s: float | None = None,
) -> dict[str, Any]:
    """Replay parked chunks matching `batch_id` and/or `message_ids` (all, when neither is given), oldest
    first; with `rate`, at most that many chunks per second, so a fixed downstream is not hit by the whole
    backlog at once. Every call stops taking chunks after `window_s` (default MAX_REPLAY_S) whatever its rate,
    having taken at least one: the answer's `more` says to call again for the rest. Each partition's doorbell
    rings (and its look chain is armed) as its first chunk goes back, not after the loop: a call that fails or
    stops part-way leaves nothing it put back unannounced."""
    if batch_id is not None and await _ended(services, batch_id, {}):
        raise BatchConflict(
            f"batch {batch_id} was cancelled (or ended by its max_failed_fraction): its parked chunks are not "
            "replayable; submit the items again as a new batch",
            batch_id=batch_id,
        )
    ended_batches: dict[str, bool] = {}
    window_s = MAX_REPLAY_S if window_s is None else window_s
    pace = Pace(rate)
    if rate is not None:  # what fits in one answer at this pace
        limit = min(limit, 1 + math.floor(window_s * rate))
    deadline = time.monotonic() + window_s
    announcer = Announcer(services)
    replayed: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    more = False
    state = await services.storage.ensure_container(services.settings.state_container)
    for work_queue in services.settings.partition_queues():
        name = services.settings.poison_queue(work_queue)
        client = await services.storage.ensure_queue(name)
        left = limit - len(replayed) - len(skipped)
        if left <= 0:
            more = True
            break
        found = await poison_index.find(
            state, name, batch_id=batch_id, message_ids=message_ids, limit=left, exclude=exclude
        )
        more = more or len(found) >= left
        for entry in found:
            if (replayed or skipped) and time.monotonic() >= deadline:
                more = True
                break
            parked = from_entry(entry)
            if parked.message.chunk_text is None:
                skipped.append({**parked.summary(), "why": "not a chunk: inspect it and fix it by hand"})
                continue
            if entry.batch_id is not None and await _ended(services, entry.batch_id, ended_batches):
                skipped.append({**parked.summary(), "why": "its batch was cancelled: not replayable"})
                continue
            await pace.next()
            try:
                why = await _replay_one(services, client, entry, parked, announcer, work_queue)
            except ReplayConflict as e:
                why = e.message
            if why is not None:
                skipped.append({**parked.summary(), "why": why})
                continue
            replayed.append(parked.summary())
        if more and time.monotonic() >= deadline:
            break
    log.warning("replayed %d parked chunk(s) (%d skipped)%s", len(replayed), len(skipped), "; more left" * more)
    out = {"replayed": len(replayed), "skipped": skipped, "chunks": replayed, "more": more}
    return out | {"limit": limit, "seconds": round(pace.elapsed(), 3)} | ({"rate": rate} if rate is not None else {})


class Announcer:
    """Marks a lane before a chunk goes back to it and again after, and rings a partition's doorbell (arming its
    look chain) the first time a chunk goes back to it in one replay call. The mark before is what a submit's is
    (`storing`): no drainer records the lane quiet (`shared.engine.lane_queues`) while it is about to hold the
    chunk, and a failure leaves the chunk parked; the mark after moves it again, so a drainer that recorded the
    lane quiet in between looks at it once more (best effort: the timer's look, which trusts no quiet record,
    covers a lane whose second mark failed)."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.rung: set[str] = set()
        self.marked: set[str] = set()

    async def before(self, lane: str) -> None:
        """Raises StorageError when the lane cannot be marked: the chunk then stays parked."""
        await lane_queues.mark(self.services, lane, storing=True)

    async def announce(self, lane: str, partition: str) -> None:
        if partition not in self.rung:
            self.rung.add(partition)
            await _ring(self.services, {partition})
        if lane not in self.marked:
            self.marked.add(lane)
            try:
                await lane_queues.mark(self.services, lane)
            except StorageError as e:
                log.warning("replayed chunks on %s: lane not marked again (the timer's look covers it): %s", lane, e)


async def _ended(services: Services, batch_id: str, known: dict[str, bool]) -> bool:
    """Was the batch ended (cancelled, or failed by its tolerance)? One manifest read per batch per replay."""
    if batch_id not in known:
        try:
            manifest, _ = await ended.read_manifest(
                services.storage.container(services.settings.batches_container), batch_id
            )
            known[batch_id] = manifest.ended is not None
        except ResourceMissing:
            known[batch_id] = False
    return known[batch_id]


class Pace:
    """Spaces calls `1 / rate` seconds apart from the first (no spacing without a rate)."""

    def __init__(self, rate: float | None) -> None:
        self.rate, self.calls, self.started = rate, 0, time.monotonic()

    async def next(self) -> None:
        if self.rate is not None:
            await asyncio.sleep(max(0.0, self.started + self.calls / self.rate - time.monotonic()))
        self.calls += 1

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def replay_lane(partition: str, source: str) -> str:
    """Where a chunk parked from `source` goes back to: its own lane when it is one of the partition's (chunks
    parked before lanes existed name the partition itself)."""
    return source if lanes.parse(partition, source) is not None else partition


async def _replay_one(
    services: Services,
    client: Any,
    entry: poison_index.Entry,
    parked: Parked,
    announcer: Announcer,
    partition: str,
) -> str | None:
    """Re-enqueue one parked chunk of `partition` to its lane and announce it; None when done, else why it was
    left parked (or, for a stale copy whose items a later attempt settled, deleted)."""
    assert parked.message.chunk_text is not None
    chunk = envelope.decode(parked.message.chunk_text)
    lane = replay_lane(partition, parked.message.info.queue)
    found = await _mark_retrying(services, chunk.header)
    if found is Parent.SETTLED:
        await _unpark(services, client, entry, parked)
        log.info("deleted a stale parked copy of chunk %d of batch %s from %s",
                 chunk.header.chunk, chunk.header.batch_id, parked.queue)  # fmt: skip
        return "its items were settled by a later attempt: this stale parked copy was deleted"
    if found is not Parent.MARKED:
        return "its items are no longer failed (it was replayed already, or its record is missing)"
    work = await services.storage.ensure_queue(lane)
    await announcer.before(lane)
    async with translated(f"re-enqueue to {lane}"):
        await work.send_message(parked.message.chunk_text, time_to_live=NEVER_EXPIRES)
    await announcer.announce(lane, partition)
    await _unpark(services, client, entry, parked)
    log.info(
        "replayed chunk %d of batch %s (%d item(s)) from %s",
        chunk.header.chunk, chunk.header.batch_id, parked.message.info.failed, parked.queue,
    )  # fmt: skip
    return None


async def _unpark(services: Services, client: Any, entry: poison_index.Entry, parked: Parked) -> None:
    try:
        async with translated(f"delete {entry.message_id} from {parked.queue}"):
            await client.delete_message(entry.message_id, pop_receipt=entry.pop_receipt)
    except ResourceMissing:
        log.info("parked message %s was already gone from %s", entry.message_id, parked.queue)
    state = services.storage.container(services.settings.state_container)
    await poison_index.remove(state, parked.queue, entry.message_id)


class Parent(Enum):
    """What a parked chunk's parent result record says of its items."""

    MARKED = "marked"  # they were failed; now retrying (this replay carries them)
    SETTLED = "settled"  # a later attempt settled them: the parked copy is stale
    UNSURE = "unsure"  # retrying with no record of the next generation yet (a replay may be in flight), or no record


async def _mark_retrying(services: Services, header: envelope.ChunkHeader) -> Parent:
    """In the parent generation's result record, the replayed items move from `failed` to `retrying`,
    so the batch counts them once more as pending, then by their new outcome. The record is changed where it
    is (its blob rewritten over the version read), so it stays the newest of its lineage.

    SETTLED when the parent's records hold none of these items as failed and none as retrying without a record
    of the generation that carries them: replaying would count them twice, and the parked copy is stale. A
    concurrent change of the record (another replay, a redelivery) is met by reading it again; if it keeps
    changing, ReplayConflict, and the chunk stays parked."""
    positions = set(header.positions or [])
    container = services.storage.container(services.settings.results_container)
    for _ in range(MARK_ATTEMPTS):
        listed = results.newest(await list_entries(container, header.batch_id))
        parents = [e for e in listed if (e.chunk, e.gen) == (header.chunk, header.gen - 1)]
        carried = any((e.chunk, e.gen) == (header.chunk, header.gen) for e in listed)
        for entry in (e for e in parents if e.failed):
            try:
                doc, etag = await read_json(container, entry.blob)
            except ResourceMissing:
                continue
            record = results.select(doc, entry)
            if record is None:
                continue
            moving = [f for f in record["failed"] if f["i"] in positions]
            if not moving:
                continue
            record["failed"] = [f for f in record["failed"] if f["i"] not in positions]
            record["retrying"] = sorted(set(record["retrying"]) | {f["i"] for f in moving})
            try:
                await write_json(container, entry.blob, doc, etag=etag, metadata=results.blob_metadata(doc))
            except PreconditionFailed:
                log.warning("result blob %s changed while replaying; reading it again", entry.blob)
                break  # read the lineage again from the listing
            return Parent.MARKED
        else:
            in_flight = any(e.retrying for e in parents) and not carried
            return Parent.UNSURE if not parents or in_flight else Parent.SETTLED
    raise ReplayConflict(
        f"the result record of chunk {header.chunk} of batch {header.batch_id} kept changing; replay it again",
        batch_id=header.batch_id,
    )


async def _ring(services: Services, queues: set[str]) -> None:
    for queue in sorted(queues):
        event = TriggerEvent(services.settings.account_name, queue, Reason.REPLAY)
        try:
            await services.publisher.publish(event)
        except TriggerUnavailable as e:
            log.warning("replayed chunks on %s wait for Service Bus (this process tries again): %s", queue, e)
            services.deferred.add(event)
            continue
        await lookout.watch(services, event)
