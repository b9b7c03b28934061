"""Operator tools for the poison queues: list, inspect and replay parked chunks.

Replay puts a parked chunk back on its work queue (its envelope already names the next generation),
marks its items as retrying again in the result record that reported them failed, rings the doorbell,
and only then deletes the poison message. Replaying twice is harmless: the second call finds nothing,
and a replay interrupted midway re-enqueues a chunk whose second result has the same lineage and counts once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from azure.storage.queue import QueueMessage

from shared import envelope, poison, results
from shared.errors import (
    MalformedEnvelope,
    NotFound,
    PreconditionFailed,
    ReplayConflict,
    ResourceMissing,
    StorageError,
    TriggerUnavailable,
)
from shared.events import Reason, TriggerEvent
from shared.result_store import list_entries
from shared.runtime import Services
from shared.storage import NEVER_EXPIRES, read_json, translated, write_json

log = logging.getLogger(__name__)

PAGE = 32
MARK_ATTEMPTS = 5  # reads of a parent record that keeps changing under a replay before giving up
HIDE_S = 30  # how long a scanned poison message stays hidden from other operators while we look at it


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
    for work_queue in services.settings.partition_queues():
        name = services.settings.poison_queue(work_queue)
        client = await services.storage.ensure_queue(name)
        async with translated(f"peek {name}"):
            for m in await client.peek_messages(max_messages=PAGE):
                if m.id == message_id:
                    return parse(name, m).detail()
        found = await _scan(services, name, {message_id}, act=None)
        if found:
            return found[0]
    raise NotFound(f"no parked chunk with message id {message_id}", message_id=message_id[:64])


async def replay(
    services: Services, *, batch_id: str | None = None, message_ids: set[str] | None = None, limit: int = 1000
) -> dict[str, Any]:
    """Replay parked chunks matching `batch_id` and/or `message_ids` (all, when neither is given)."""
    replayed: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    touched: set[str] = set()

    async def act(client: Any, message: QueueMessage, parked: Parked) -> bool:
        if parked.message.chunk_text is None:
            skipped.append({**parked.summary(), "why": "not a chunk: inspect it and fix it by hand"})
            return False
        try:
            why = await _replay_one(services, client, message, parked)
        except ReplayConflict as e:
            why = e.message
        if why is not None:
            skipped.append({**parked.summary(), "why": why})
            return False
        replayed.append(parked.summary())
        touched.add(parked.message.info.queue)
        return True

    for work_queue in services.settings.partition_queues():
        name = services.settings.poison_queue(work_queue)
        await _scan(services, name, message_ids, act=act, batch_id=batch_id, limit=limit - len(replayed))
    await _ring(services, touched)
    log.warning("replayed %d parked chunk(s) (%d skipped)", len(replayed), len(skipped))
    return {"replayed": len(replayed), "skipped": skipped, "chunks": replayed}


async def _scan(
    services: Services,
    name: str,
    message_ids: set[str] | None,
    *,
    act: Any,
    batch_id: str | None = None,
    limit: int = 10**9,
) -> list[dict[str, Any]]:
    """Receive the poison queue page by page (hiding each message briefly) and act on the matching ones;
    the rest are made visible again at the end, so looking leaves the queue as it was."""
    client = await services.storage.ensure_queue(name)
    found: list[dict[str, Any]] = []
    seen: set[str] = set()
    passed: list[QueueMessage] = []  # hidden by our receive, not acted on
    try:
        while len(found) < limit:
            async with translated(f"receive from {name}"):
                page = [
                    m
                    async for m in client.receive_messages(
                        messages_per_page=PAGE, max_messages=PAGE, visibility_timeout=HIDE_S
                    )
                ]
            fresh = [m for m in page if m.id not in seen]
            if not fresh:
                break
            for message in fresh:
                seen.add(message.id)
                parked = parse(name, message)
                summary = parked.summary()
                wanted = (message_ids is None or message.id in message_ids) and (
                    batch_id is None or summary["batch_id"] == batch_id
                )
                if wanted and act is None:
                    found.append(parked.detail())
                    passed.append(message)
                elif wanted and await act(client, message, parked):
                    found.append(summary)
                else:
                    passed.append(message)
                if len(found) >= limit:
                    break
    finally:
        await _unhide(client, name, passed)
    return found


async def _unhide(client: Any, name: str, messages: list[QueueMessage]) -> None:
    """Best effort: a message we could not unhide reappears by itself after HIDE_S."""
    for message in messages:
        try:
            async with translated(f"unhide {message.id} in {name}"):
                await client.update_message(message, visibility_timeout=0)
        except StorageError as e:
            log.warning("could not unhide %s in %s (%s); it reappears within %d s", message.id, name, e, HIDE_S)


async def _replay_one(services: Services, client: Any, message: QueueMessage, parked: Parked) -> str | None:
    """Re-enqueue one parked chunk; None when done, else why it was left parked."""
    assert parked.message.chunk_text is not None
    chunk = envelope.decode(parked.message.chunk_text)
    if not await _mark_retrying(services, chunk.header):
        return "its items are no longer failed (a later attempt settled them, or it was replayed already)"
    work = await services.storage.ensure_queue(parked.message.info.queue)
    async with translated(f"re-enqueue to {parked.message.info.queue}"):
        await work.send_message(parked.message.chunk_text, time_to_live=NEVER_EXPIRES)
    async with translated(f"delete {message.id} from {parked.queue}"):
        await client.delete_message(message)
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
        try:
            await services.publisher.publish(TriggerEvent(services.settings.account_name, queue, Reason.REPLAY))
        except TriggerUnavailable as e:
            log.warning("replayed chunks on %s wait for the fallback: %s", queue, e)
