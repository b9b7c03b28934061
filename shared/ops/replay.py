"""Operator tools for the poison queues: list, inspect and replay parked chunks.

Nothing here receives from a poison queue (receiving hides a message from every other reader): listing peeks
at the first page, inspecting and replaying use the index the drainers write when they park a chunk
(`shared.store.poison_index`), so each costs O(1) or O(page) storage calls whatever the queue's depth.

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
from dataclasses import dataclass
from typing import Any

from azure.storage.queue import QueueMessage

from shared.batch import envelope, poison, results
from shared.core import lanes
from shared.core.errors import (
    BatchConflict,
    MalformedEnvelope,
    NotFound,
    PreconditionFailed,
    ReplayConflict,
    ResourceMissing,
    TriggerUnavailable,
)
from shared.core.events import Reason, TriggerEvent
from shared.engine import lane_queues
from shared.services import Services
from shared.store import ended, poison_index
from shared.store.result_store import list_entries
from shared.store.storage import NEVER_EXPIRES, read_json, translated, write_json
from shared.watch import lookout

log = logging.getLogger(__name__)
DEFAULT_LIMIT = 1000  # parked chunks one replay call takes at most, unless it asks for fewer
MAX_PACED_REPLAY_S = 60  # a paced replay answers within about a minute: it takes what its rate allows in that

PAGE = 32
MARK_ATTEMPTS = 5  # reads of a parent record that keeps changing under a replay before giving up


@dataclass(frozen=True)
class Parked:
    queue: str  # the poison queue
    message_id: str
    inserted_on: str | None
    message: poison.PoisonMessage

    def summary(self) -> dict[str, Any]:
        header = envelope.decode(self.message.chunk_text).header if self.message.chunk_text else None
        return {
            "poison_queue": self.queue,
            "message_id": self.message_id,
            "inserted_on": self.inserted_on,
            "work_queue": self.message.info.queue,
            "batch_id": header.batch_id if header else None,
            "chunk": header.chunk if header else None,
            "failed": self.message.info.failed,
            "attempt": self.message.info.attempt,
            "reason": self.message.info.reason,
            "replayable": self.message.chunk_text is not None,
        }

    def detail(self) -> dict[str, Any]:
        out = self.summary()
        if self.message.chunk_text is not None:
            chunk = envelope.decode(self.message.chunk_text)
            out["positions"] = list(chunk.header.positions or [])
            out["items"] = chunk.items
            out["claim_check"] = chunk.blob
        else:
            out["raw"] = self.message.raw
        return out


def parse(queue: str, message: QueueMessage) -> Parked:
    try:
        decoded = poison.decode(str(message.content))
    except MalformedEnvelope:
        decoded = poison.PoisonMessage(poison.PoisonInfo(queue, "unreadable poison message", 0, 0, ""), None, None)
    inserted = message.inserted_on.isoformat() if message.inserted_on else None
    return Parked(queue, str(message.id), inserted, decoded)


async def list_parked(services: Services) -> list[dict[str, Any]]:
    """Per partition: the poison queue's depth and the first 32 parked chunks (peeked: nothing is hidden)."""
    out = []
    for work_queue in services.settings.partition_queues():
        name = services.settings.poison_queue(work_queue)
        client = await services.storage.ensure_queue(name)
        async with translated(f"peek {name}"):
            depth = (await client.get_queue_properties()).approximate_message_count or 0
            peeked = await client.peek_messages(max_messages=PAGE)
        out.append({"poison_queue": name, "depth": depth, "first": [parse(name, m).summary() for m in peeked]})
    return out


async def inspect(services: Services, message_id: str) -> dict[str, Any]:
    """One index read per partition (then a peek at the first page, for chunks parked before the index)."""
    state = await services.storage.ensure_container(services.settings.state_container)
    for work_queue in services.settings.partition_queues():
        name = services.settings.poison_queue(work_queue)
        entry = await poison_index.get(state, name, message_id)
        if entry is not None:
            return from_entry(entry).detail()
    for work_queue in services.settings.partition_queues():
        name = services.settings.poison_queue(work_queue)
        client = await services.storage.ensure_queue(name)
        async with translated(f"peek {name}"):
            for m in await client.peek_messages(max_messages=PAGE):
                if m.id == message_id:
                    return parse(name, m).detail()
    raise NotFound(f"no parked chunk with message id {message_id}", message_id=message_id[:64])


def from_entry(entry: poison_index.Entry) -> Parked:
    try:
        decoded = poison.decode(entry.text)
    except MalformedEnvelope:
        decoded = poison.PoisonMessage(poison.PoisonInfo("?", "unreadable poison message", 0, 0, ""), None, None)
    return Parked(entry.poison_queue, entry.message_id, entry.inserted_on, decoded)


async def replay(
    services: Services,
    *,
    batch_id: str | None = None,
    message_ids: set[str] | None = None,
    limit: int = DEFAULT_LIMIT,
    rate: float | None = None,
    exclude: frozenset[str] = frozenset(),
    window_s: float = MAX_PACED_REPLAY_S,
) -> dict[str, Any]:
    """Replay parked chunks matching `batch_id` and/or `message_ids` (all, when neither is given); with `rate`,
    at most that many chunks per second, so a fixed downstream is not hit by the whole backlog at once, and no
    more than that pace allows in MAX_PACED_REPLAY_S (the answer's `limit`; call again for the rest)."""
    if batch_id is not None and await _ended(services, batch_id, {}):
        raise BatchConflict(
            f"batch {batch_id} was cancelled (or ended by its max_failed_fraction): its parked chunks are not "
            "replayable; submit the items again as a new batch",
            batch_id=batch_id,
        )
    ended_batches: dict[str, bool] = {}
    pace = Pace(rate)
    if rate is not None:  # what fits in one answer at this pace; the caller calls again for the rest
        limit = min(limit, 1 + math.floor(window_s * rate))
    replayed: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    touched: dict[str, str] = {}  # lane: its partition
    state = await services.storage.ensure_container(services.settings.state_container)
    for work_queue in services.settings.partition_queues():
        name = services.settings.poison_queue(work_queue)
        client = await services.storage.ensure_queue(name)
        left = limit - len(replayed)
        if left <= 0:
            break
        found = await poison_index.find(
            state, name, batch_id=batch_id, message_ids=message_ids, limit=left, exclude=exclude
        )
        for entry in found:
            parked = from_entry(entry)
            if parked.message.chunk_text is None:
                skipped.append({**parked.summary(), "why": "not a chunk: inspect it and fix it by hand"})
                continue
            if entry.batch_id is not None and await _ended(services, entry.batch_id, ended_batches):
                skipped.append({**parked.summary(), "why": "its batch was cancelled: not replayable"})
                continue
            await pace.next()
            lane = replay_lane(work_queue, parked.message.info.queue)
            try:
                why = await _replay_one(services, client, entry, parked, lane)
            except ReplayConflict as e:
                why = e.message
            if why is not None:
                skipped.append({**parked.summary(), "why": why})
                continue
            replayed.append(parked.summary())
            touched[lane] = work_queue
    # A drainer already at work sees the marks at its next listing; an idle queue gets its event.
    for lane in sorted(touched):
        await lane_queues.mark(services, lane)
    await _ring(services, set(touched.values()))
    log.warning("replayed %d parked chunk(s) (%d skipped)", len(replayed), len(skipped))
    out = {"replayed": len(replayed), "skipped": skipped, "chunks": replayed}
    return out | ({"rate": rate, "limit": limit, "seconds": round(pace.elapsed(), 3)} if rate is not None else {})


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
    services: Services, client: Any, entry: poison_index.Entry, parked: Parked, lane: str
) -> str | None:
    """Re-enqueue one parked chunk to `lane`; None when done, else why it was left parked."""
    assert parked.message.chunk_text is not None
    chunk = envelope.decode(parked.message.chunk_text)
    if not await _mark_retrying(services, chunk.header):
        return "its items are no longer failed (a later attempt settled them, or it was replayed already)"
    work = await services.storage.ensure_queue(lane)
    async with translated(f"re-enqueue to {lane}"):
        await work.send_message(parked.message.chunk_text, time_to_live=NEVER_EXPIRES)
    try:
        async with translated(f"delete {entry.message_id} from {parked.queue}"):
            await client.delete_message(entry.message_id, pop_receipt=entry.pop_receipt)
    except ResourceMissing:
        log.info("parked message %s was already gone from %s", entry.message_id, parked.queue)
    state = services.storage.container(services.settings.state_container)
    await poison_index.remove(state, parked.queue, entry.message_id)
    log.info(
        "replayed chunk %d of batch %s (%d item(s)) from %s",
        chunk.header.chunk, chunk.header.batch_id, parked.message.info.failed, parked.queue,
    )  # fmt: skip
    return None


async def _mark_retrying(services: Services, header: envelope.ChunkHeader) -> bool:
    """In the parent generation's result record, the replayed items move from `failed` to `retrying`,
    so the batch counts them once more as pending, then by their new outcome. The record is changed where it
    is (its blob rewritten over the version read), so it stays the newest of its lineage.

    False when no parent holds these items as failed any more: replaying them would count them twice. A
    concurrent change of the record (another replay, a redelivery) is met by reading it again; if it keeps
    changing, ReplayConflict, and the chunk stays parked."""
    positions = set(header.positions or [])
    container = services.storage.container(services.settings.results_container)
    for _ in range(MARK_ATTEMPTS):
        parents = [
            e
            for e in results.newest(await list_entries(container, header.batch_id))
            if (e.chunk, e.gen) == (header.chunk, header.gen - 1) and e.failed
        ]
        for entry in parents:
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
            return True
        else:
            return False
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
