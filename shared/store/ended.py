"""Ending a batch early, in storage: its manifest says so, and a marker blob tells the drainers.

`end` writes the manifest (`ended`, `ended_at`, over its ETag) and then the marker `ended/{batch id}` in the
state container; drainers list the markers at most every `ENDED_CHECK_S` (`shared.batch.lifecycle`), one
listing for every ended batch, and discard the batch's chunks on receipt. Ending again is a no-op that
rewrites the marker (it heals a crash between the two writes). The marker is kept for KEEP_S after it was
written, even once every chunk of the batch has a record: a chunk a drainer recorded but died before deleting
comes back after its visibility timeout, and must still be discarded (the simulation found such a chunk handed
to the handler 23 s after the cancel's answer when the marker went at the batch's last record). Markers older
than that are pruned when another batch is ended: one listing per end, a delete per old marker.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from azure.storage.blob.aio import ContainerClient

from shared.batch.batches import Manifest, State
from shared.core import layout
from shared.core.errors import PreconditionFailed, ResourceMissing, StorageError
from shared.store.storage import read_json, translated, write_bytes, write_json

log = logging.getLogger(__name__)

PREFIX = "ended/"
KEEP_S = 7 * 24 * 3600  # a message can be hidden at most 7 days: none of the batch can come back after
ATTEMPTS = 5  # rewrites tried when the manifest changes under us (a submit's own second write, a finalize)


def marker(batch_id: str) -> str:
    return f"{PREFIX}{batch_id}"


async def read_manifest(batches: ContainerClient, batch_id: str) -> tuple[Manifest, str]:
    doc, etag = await read_json(batches, layout.manifest_blob(batch_id))
    return Manifest.from_json(doc), etag


async def end(
    batches: ContainerClient, state: ContainerClient, batch_id: str, how: str, now: datetime
) -> tuple[Manifest, bool]:
    """End an accepted batch `how` (cancelled | failed) unless it is ended or final already; the manifest as
    it stands, and whether this call ended it. `ResourceMissing` if it has no manifest."""
    for _ in range(ATTEMPTS):
        manifest, etag = await read_manifest(batches, batch_id)
        if manifest.state is not State.ACCEPTED:
            return manifest, False  # still being submitted, or never accepted: nothing of it runs
        if manifest.ended is not None or manifest.final_status is not None:
            if manifest.ended is not None:
                await mark(state, batch_id)  # heals a crash between the manifest and the marker
            return manifest, False
        ended = replace(manifest, ended=how, ended_at=now.isoformat())
        try:
            await write_json(batches, layout.manifest_blob(batch_id), ended.to_json(), etag=etag)
        except PreconditionFailed:
            continue
        await mark(state, batch_id)
        log.warning("batch %s ended: %s", batch_id, how)
        await prune(state, now)
        return ended, True
    raise PreconditionFailed(f"end batch {batch_id}", "its manifest kept changing while it was being ended")


async def mark(state: ContainerClient, batch_id: str) -> None:
    await write_bytes(state, marker(batch_id), b"")


async def prune(state: ContainerClient, now: datetime) -> int:
    """Delete the markers written more than KEEP_S ago (best effort); how many went."""
    old: list[str] = []
    try:
        async with translated("list ended batches"):
            async for blob in state.list_blobs(name_starts_with=PREFIX):
                if blob.last_modified is not None and (now - blob.last_modified).total_seconds() > KEEP_S:
                    old.append(blob.name)
        for name in old:
            async with translated(f"delete blob {name}"):
                await state.delete_blob(name)
    except (ResourceMissing, StorageError) as e:
        log.info("ended markers not pruned this time: %s", e)
    return len(old)


async def listed(state: ContainerClient) -> frozenset[str]:
    """Every ended batch with chunks possibly left (one listing page per 5,000)."""
    found: set[str] = set()
    try:
        async with translated("list ended batches"):
            async for name in state.list_blob_names(name_starts_with=PREFIX):
                found.add(name[len(PREFIX) :])
    except ResourceMissing:
        pass  # the container does not exist yet: nothing was ever ended
    return frozenset(found)
