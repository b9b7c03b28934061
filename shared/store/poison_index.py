"""The index of parked chunks the app keeps: one small blob per poison message, written when it is parked.

Reading a poison queue beyond its first page means receiving, which hides each message from every other
reader for a while; inspecting or replaying by batch that way cost a call per parked message and made
concurrent replays miss chunks. The index answers instead: an entry holds the message's id, the pop receipt
its put returned (valid for deleting it, since nobody receives poison messages), its batch and its text.
Looking up one message is one read; finding a batch's parked chunks is one listing page per 5,000 entries.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from azure.storage.blob.aio import ContainerClient

from shared.core import layout
from shared.core.errors import ResourceMissing, StorageError
from shared.store.storage import read_json, translated, write_json

log = logging.getLogger(__name__)

PARKED_MS = "parked_ms"  # metadata: when the entry was written (epoch ms), so a listing sorts by it with no reads


@dataclass(frozen=True)
class Entry:
    poison_queue: str
    message_id: str
    pop_receipt: str
    inserted_on: str | None
    batch_id: str | None
    text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "poison_queue": self.poison_queue,
            "message_id": self.message_id,
            "pop_receipt": self.pop_receipt,
            "inserted_on": self.inserted_on,
            "batch_id": self.batch_id,
            "text": self.text,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Entry:
        return cls(
            poison_queue=str(doc["poison_queue"]),
            message_id=str(doc["message_id"]),
            pop_receipt=str(doc["pop_receipt"]),
            inserted_on=doc.get("inserted_on"),
            batch_id=doc.get("batch_id"),
            text=str(doc["text"]),
        )


async def add(container: ContainerClient, entry: Entry) -> None:
    """Best effort: a parked chunk without an entry is still parked (and listed); it logs why."""
    try:
        await write_json(
            container,
            layout.poison_index_blob(entry.poison_queue, entry.message_id),
            entry.to_json(),
            metadata={"batch_id": entry.batch_id or "-", PARKED_MS: str(time.time_ns() // 1_000_000)},
        )
    except StorageError as e:
        log.warning("parked message %s has no index entry (replay by batch will not find it): %s",
                    entry.message_id, e)  # fmt: skip


async def get(container: ContainerClient, poison_queue: str, message_id: str) -> Entry | None:
    try:
        doc, _ = await read_json(container, layout.poison_index_blob(poison_queue, message_id))
    except ResourceMissing:
        return None
    return Entry.from_json(doc)


async def find(
    container: ContainerClient,
    poison_queue: str,
    *,
    batch_id: str | None,
    message_ids: set[str] | None,
    limit: int,
    exclude: frozenset[str] = frozenset(),
) -> list[Entry]:
    """The `limit` oldest entries of one poison queue matching the batch and/or ids (all when neither), oldest
    first; never those in `exclude` (a background replay's chunks it already left parked). `oldest`, then one
    read per entry answered."""
    found = []
    for message_id in await oldest(
        container, poison_queue, batch_id=batch_id, message_ids=message_ids, limit=limit, exclude=exclude
    ):
        entry = await get(container, poison_queue, message_id)
        if entry is not None:
            found.append(entry)
    return found


async def oldest(
    container: ContainerClient,
    poison_queue: str,
    *,
    batch_id: str | None,
    message_ids: set[str] | None,
    limit: int,
    exclude: frozenset[str] = frozenset(),
) -> list[str]:
    """The message ids of `find`'s entries, with no read: one listing (a page per 5,000 entries), sorted by when
    each was parked. A caller bounded by time (`shared.ops.replay`) reads each entry (`get`) as its turn comes."""
    listed = await listing(container, poison_queue, batch_id=batch_id, message_ids=message_ids, exclude=exclude)
    return [message_id for _, message_id in sorted(listed)[:limit]]


async def listing(
    container: ContainerClient,
    poison_queue: str,
    *,
    batch_id: str | None = None,
    message_ids: set[str] | None = None,
    exclude: frozenset[str] = frozenset(),
) -> list[tuple[int, str]]:
    """(when parked, epoch ms; message id) of each matching entry, in listing order (no reads). An entry written
    before the time was kept in its metadata counts by its blob's creation time (to the second)."""
    prefix = layout.poison_index_prefix(poison_queue)
    out: list[tuple[int, str]] = []
    async with translated(f"list parked chunks of {poison_queue}"):
        async for blob in container.list_blobs(name_starts_with=prefix, include=["metadata"]):
            message_id = blob.name[len(prefix) :].removesuffix(".json")
            if (message_ids is not None and message_id not in message_ids) or message_id in exclude:
                continue
            metadata = blob.metadata or {}
            if batch_id is not None and metadata.get("batch_id") != batch_id:
                continue
            out.append((parked_ms(metadata.get(PARKED_MS), blob.creation_time), message_id))
    return out


def parked_ms(stamp: str | None, created: datetime | None) -> int:
    if stamp is not None and stamp.isdigit() and len(stamp) <= 15:
        return int(stamp)
    return int(created.timestamp() * 1000) if created is not None else 0


async def set_aside(container: ContainerClient, entry: Entry, why: str) -> None:
    """Keep a parked chunk that is never to be replayed (its batch is final or ended) apart from the index: its
    entry with why and when, written before the message and the entry are deleted, so nothing is lost between."""
    doc = entry.to_json() | {"set_aside": why, "set_aside_at": datetime.now(timezone.utc).isoformat()}
    await write_json(container, layout.set_aside_blob(entry.poison_queue, entry.message_id), doc)


async def get_set_aside(container: ContainerClient, poison_queue: str, message_id: str) -> dict[str, Any] | None:
    try:
        doc, _ = await read_json(container, layout.set_aside_blob(poison_queue, message_id))
    except ResourceMissing:
        return None
    return dict(doc)


async def remove(container: ContainerClient, poison_queue: str, message_id: str) -> None:
    try:
        async with translated(f"remove index entry {message_id}"):
            await container.delete_blob(layout.poison_index_blob(poison_queue, message_id))
    except ResourceMissing:
        pass
