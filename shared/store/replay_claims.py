"""A replay's note, written before it claims a parked chunk and deleted once the claim is settled, so a claim whose
replay died is found and taken over by the timer, not left for a replay that may never come.

A replay claims a parked chunk by marking its items `retrying` in their result record (`shared.ops.replay_marks`);
the record then counts them pending until the chunk is back. A replay killed between that mark and its send (or
whose release storage refused) leaves the items pending and the chunk parked: only a later replay of the chunk,
once the mark is CLAIM_S old, takes it over. Nothing asks for that replay, so the batch stayed `processing` for
good. Before it claims, a replay now writes `replay-claims/{poison queue}/{message id}/{token}` (empty), and
deletes it once its claim is settled: the chunk back on its queue and unparked, the claim given back, or nothing
claimed. The fallback timer lists the notes (`shared.ops.replay_takeover`) and finishes the replay of each one older
than CLAIM_S.

Cost: per chunk a replay looks at, one PutBlob and one DeleteBlob; per timer tick, one ListBlobs (empty unless a
replay is in flight or died).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime

from azure.storage.blob.aio import ContainerClient

from shared.core import layout
from shared.core.errors import ResourceMissing, StorageError
from shared.store.storage import translated

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Note:
    """One replay's note on one parked message, and when storage wrote it."""

    name: str
    poison_queue: str
    message_id: str
    written: datetime | None


async def write(state: ContainerClient, poison_queue: str, message_id: str) -> str:
    """Write a new note before claiming the message; its name, to `drop` once the claim is settled. Raises
    StorageError (the replay then claims nothing)."""
    name = layout.replay_claim_blob(poison_queue, message_id, uuid.uuid4().hex)
    async with translated(f"note the replay of {message_id}"):
        await state.get_blob_client(name).upload_blob(b"", overwrite=True)
    return name


async def drop(state: ContainerClient, name: str) -> None:
    """Delete a settled claim's note (best effort: a note left behind costs the timer one look after CLAIM_S)."""
    try:
        async with translated(f"delete replay note {name}"):
            await state.delete_blob(name)
    except ResourceMissing:
        pass
    except StorageError as e:
        log.warning("replay note %s stays (the timer looks at it after its claim's time): %s", name, e)


async def listed(state: ContainerClient) -> list[Note]:
    """Every note: one ListBlobs call per 5,000 (none written: an empty page)."""
    out: list[Note] = []
    try:
        async with translated("list replay notes"):
            async for blob in state.list_blobs(name_starts_with=layout.REPLAY_CLAIMS_PREFIX):
                parts = blob.name[len(layout.REPLAY_CLAIMS_PREFIX) :].split("/")
                if len(parts) == 3:
                    out.append(Note(blob.name, parts[0], parts[1], blob.last_modified))
    except ResourceMissing:
        return []  # the state container does not exist yet: nothing was ever replayed
    return out
