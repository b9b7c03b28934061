"""Ending a batch early, in storage: its manifest says so, and a marker blob tells the drainers.

`end` writes the manifest (`ended`, `ended_at`, over its ETag) and then the marker `ended/{bucket}/{batch id}` in
the state container, named by the ten minutes (`BUCKET_S`, the writer's clock) it was written in. Drainers list
the markers at most every `ENDED_CHECK_S` (`shared.batch.lifecycle`): a process's first listing reads them all,
each later one only the buckets written since the previous one began (less `LOOKBACK_S`), so the listing every
5 s costs what the last minutes' cancels wrote, not what a week of them did. A marker write slower than half the
look-back is written again in the current bucket, so a later listing cannot miss it. Ending again is a no-op that
rewrites the marker (it heals a crash between the two writes). The marker is kept for KEEP_S after it was
written, even once every chunk of the batch has a record: a chunk a drainer recorded but died before deleting
comes back after its visibility timeout, and must still be discarded (the simulation found such a chunk handed
to the handler 23 s after the cancel's answer when the marker went at the batch's last record). Each end prunes
the bucket that last aged past KEEP_S (one listing of that bucket, a delete per marker in it): every marker is
listed for pruning once, by whichever end comes in the ten minutes after it aged out; those of a ten minutes no
end followed are skipped by the first listings of later processes (one listing page per 5,000) until an end
comes at the right time, or deleted by such a listing (at most PRUNE_MAX a listing).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from azure.storage.blob.aio import ContainerClient

from shared.batch.batches import Manifest, State
from shared.core import layout
from shared.core.errors import PreconditionFailed, ResourceMissing, StorageError
from shared.store.storage import read_json, translated, write_bytes, write_json

log = logging.getLogger(__name__)

PREFIX = "ended/"
KEEP_S = 7 * 24 * 3600  # a message can be hidden at most 7 days: none of the batch can come back after
ATTEMPTS = 5  # rewrites tried when the manifest changes under us (a submit's own second write, a finalize)
BUCKET_S = 600  # markers are named by the ten minutes they were written in
LOOKBACK_S = 120  # a listing since T reads the buckets from T - LOOKBACK_S - CLOCK_SKEW_S on
BUCKETS_MAX = 6  # a listing since longer ago than this many buckets reads them all instead
PRUNE_MAX = 100  # markers older than KEEP_S a full listing deletes (those no end pruned in time)
CLOCK_SKEW_S = 1.0  # between the hosts' clocks (shared.batch.lifecycle.CLOCK_SKEW_S)
BUCKET_FORMAT = "%Y%m%dT%H%M"


def bucket(at: datetime) -> str:
    start = int(at.timestamp()) // BUCKET_S * BUCKET_S
    return datetime.fromtimestamp(start, timezone.utc).strftime(BUCKET_FORMAT)


def marker(batch_id: str, at: datetime | None = None) -> str:
    """The marker of a batch written at `at` (the writer's clock; now by default)."""
    return f"{PREFIX}{bucket(at or datetime.now(timezone.utc))}/{batch_id}"


def parse(name: str) -> tuple[str, datetime | None]:
    """A marker's batch id and the start of its bucket (None for a marker named before buckets: `ended/{id}`)."""
    rest = name[len(PREFIX) :]
    stamp, _, batch_id = rest.rpartition("/")
    if not stamp:
        return rest, None
    try:
        return batch_id, datetime.strptime(stamp, BUCKET_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return batch_id, None


def buckets_since(since: datetime, now: datetime) -> list[str] | None:
    """The bucket prefixes a listing since `since` must read (None: more than BUCKETS_MAX, read them all)."""
    first = since - timedelta(seconds=LOOKBACK_S + CLOCK_SKEW_S)
    last = now + timedelta(seconds=CLOCK_SKEW_S)
    names = []
    at = datetime.fromtimestamp(int(first.timestamp()) // BUCKET_S * BUCKET_S, timezone.utc)
    while at <= last:
        names.append(f"{PREFIX}{bucket(at)}/")
        if len(names) > BUCKETS_MAX:
            return None
        at += timedelta(seconds=BUCKET_S)
    return names


@dataclass(frozen=True)
class Listing:
    ids: frozenset[str]  # the ended batches it found
    full: bool  # it read every marker (else only the buckets since a time)
    aged: tuple[str, ...] = ()  # markers older than KEEP_S it met (no cancel pruned them in time), to `delete`


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
    """Write the batch's marker in the current bucket; again, in the bucket of then, if the write took longer than
    half of LOOKBACK_S (a listing since its end might not read the bucket it started in)."""
    for _ in range(ATTEMPTS):
        began = datetime.now(timezone.utc)
        await write_bytes(state, marker(batch_id, began), b"")
        if (datetime.now(timezone.utc) - began).total_seconds() <= LOOKBACK_S / 2:
            return


async def prune(state: ContainerClient, now: datetime) -> int:
    """Delete the markers of the bucket whose every marker aged past KEEP_S last (best effort): one listing; how
    many went."""
    aged = now - timedelta(seconds=KEEP_S + BUCKET_S)  # its every marker was written more than KEEP_S ago
    return await _delete(state, await _names(state, f"{PREFIX}{bucket(aged)}/"))


async def _names(state: ContainerClient, prefix: str) -> list[str]:
    try:
        async with translated("list ended batches"):
            return [name async for name in state.list_blob_names(name_starts_with=prefix)]
    except (ResourceMissing, StorageError) as e:
        log.info("ended markers not pruned this time: %s", e)
        return []


async def delete(state: ContainerClient, names: Sequence[str]) -> int:
    """Delete these markers (best effort); how many were asked."""
    return await _delete(state, names)


async def _delete(state: ContainerClient, names: Sequence[str]) -> int:
    try:
        for name in names:
            async with translated(f"delete blob {name}"):
                await state.delete_blob(name)
    except (ResourceMissing, StorageError) as e:
        log.info("ended markers not pruned this time: %s", e)
    return len(names)


async def listed(state: ContainerClient, since: datetime | None = None, now: datetime | None = None) -> Listing:
    """The ended batches with chunks possibly left: with `since` (when the previous listing began), those whose
    markers were written since (one listing per bucket, one or two), else every one (one listing page per 5,000;
    the markers older than KEEP_S it meets are skipped, and up to PRUNE_MAX of them deleted)."""
    now = now or datetime.now(timezone.utc)
    prefixes = buckets_since(since, now) if since is not None else None
    found: set[str] = set()
    old: list[str] = []
    oldest = now - timedelta(seconds=KEEP_S + BUCKET_S)
    try:
        async with translated("list ended batches"):
            for prefix in prefixes or [PREFIX]:
                async for blob in state.list_blobs(name_starts_with=prefix):
                    batch_id, written = parse(blob.name)
                    written = written or blob.last_modified  # a marker named before buckets: when it was written
                    if written is not None and written < oldest:
                        old.append(blob.name)
                    else:
                        found.add(batch_id)
    except ResourceMissing:
        pass  # the container does not exist yet: nothing was ever ended
    return Listing(frozenset(found), full=prefixes is None, aged=tuple(old[:PRUNE_MAX]))
