"""A batch's lifecycle seen from outside: cancel it, notice once that it became final, and export its results.

Cancel (`cancel`) ends the batch in its manifest and by a marker the drainers list (`shared.store.ended`): no
handler call of it starts later than `ENDED_CHECK_S` after the answer, and its chunks are recorded
`cancelled` as drainers receive them. `finalize` is the one place that notices a batch became final: it
stamps the manifest (`final_status`, `finished_at`) over its ETag, so exactly one caller sees the change and
stores the batch's completion notice, if it named a callback (`shared.ops.notices`). It runs once per batch a
drain execution recorded results of (`shared.router`), and after a cancel: two storage calls per batch (a
manifest read and a listing of its results), never per chunk, and once the stamp and the stamp in the batch's two
index entries (`shared.store.batch_index.restamp`: what the batch list shows).

The export (`export`) reads the result records in position order, a window of chunks at a time: one listing
of the batch's results (one page per 5,000 result blobs), then one GetBlob per result blob holding records of the
window's chunks: first the chunks the page's positions span (a page of `limit` lines from `start`), then
`WINDOW_CHUNKS` chunks at a time while lines are still wanted (items without a line yet, or filtered out by
status). A page of one line reads the blobs of one chunk. Memory: the listing's entries (a few dozen bytes per
chunk) and one window's records.
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_left
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import replace
from datetime import datetime, timezone
from itertools import accumulate
from typing import Any

from shared.batch import lifecycle
from shared.batch.batches import Manifest, State, is_batch_id
from shared.batch.results import ResultEntry, item_outcomes, newest
from shared.core import layout
from shared.core.errors import BatchConflict, NotFound, PreconditionFailed, ResourceMissing, StorageError
from shared.core.identity import Caller
from shared.intake import quota_gate
from shared.ops import notices
from shared.ops.status import FINAL, batch_status, crossed_tolerance, failed_items
from shared.services import Services
from shared.store import batch_index, ended
from shared.store.result_store import list_counted, read_chosen
from shared.store.storage import write_json

log = logging.getLogger(__name__)

STATUSES = ("succeeded", "failed", "cancelled", "expired")
WINDOW_CHUNKS = 256
READ_CONCURRENCY = 8
FINALIZE_S = 10  # a drain execution's finalize of the batches it touched, all of them, at most this long


def no_batch(batch_id: str) -> NotFound:
    """The 404 of a batch that does not exist, and of another tenant's: the same body, byte for byte."""
    if not is_batch_id(batch_id):
        return NotFound("no batch has this id (batch ids are 32 lowercase hex digits)", batch_id=batch_id[:64])
    return NotFound(f"no batch {batch_id}", batch_id=batch_id)


def visible(manifest: Manifest, caller: Caller | None) -> None:
    """NotFound unless `caller` (None: the app itself) may see the batch. Called right after the manifest read
    and before anything else: an unknown id and another tenant's cost the same one read."""
    if caller is not None and not caller.sees(manifest.tenant):
        raise no_batch(manifest.batch_id)


async def read(
    services: Services, batch_id: str, caller: Caller | None = None
) -> tuple[Manifest, str, list[ResultEntry]]:
    """The manifest, its ETag and the newest result entry of each lineage: one read, one listing."""
    if not is_batch_id(batch_id):
        raise no_batch(batch_id)
    settings = services.settings
    try:
        manifest, etag = await ended.read_manifest(services.storage.container(settings.batches_container), batch_id)
    except ResourceMissing:
        raise no_batch(batch_id) from None
    visible(manifest, caller)
    found = await list_counted(services.storage.container(settings.results_container), batch_id)
    return manifest, etag, newest(found)


async def cancel(services: Services, batch_id: str, caller: Caller | None = None) -> dict[str, Any]:
    """Cancel a batch (idempotent): its status, `cancelling` until no chunk of it can still run, then
    `cancelled`. A batch already final answers its status unchanged. Another tenant's batch: 404, as unknown."""
    manifest, _, entries = await read(services, batch_id, caller)
    now = datetime.now(timezone.utc)
    if manifest.state is not State.ACCEPTED:
        raise BatchConflict(
            f"batch {batch_id} is {'still being submitted' if manifest.state is State.STAGING else 'not accepted'}: "
            "there is nothing of it to cancel",
            batch_id=batch_id,
        )
    if batch_status(manifest, entries, now)["status"] in FINAL:
        return await finalize(services, batch_id) or batch_status(manifest, entries, now)
    await end(services, batch_id, lifecycle.CANCELLED)
    await finalize(services, batch_id)
    manifest, _, entries = await read(services, batch_id)
    return batch_status(manifest, entries, datetime.now(timezone.utc))


async def end(services: Services, batch_id: str, how: str) -> None:
    """End the batch `how` (cancelled | failed) in its manifest and by its marker (`shared.store.ended`)."""
    settings = services.settings
    batches = services.storage.container(settings.batches_container)
    state = await services.storage.ensure_container(settings.state_container)
    _, changed = await ended.end(batches, state, batch_id, how, datetime.now(timezone.utc))
    if changed:
        services.ended.add(batch_id)  # this process stops at once; the others within ENDED_CHECK_S


async def finalize(services: Services, batch_id: str) -> dict[str, Any] | None:
    """If the batch is final and not yet stamped so: store its completion notice, stamp it and answer its final
    status (None otherwise). The stamp comes first, over the manifest's ETag, the one write a cancel's end
    (`shared.store.ended.end`) races: the notice (create-only, idempotent) states only a status that won, never
    one the end overturned after it was read (the simulation's lifecycle seed 601: a `completed` notice of a batch
    then `cancelled`). A process that dies between the stamp and the notice leaves a stamped batch without one:
    the timer's sweep (`shared.ops.notice_sweep`, `noticed`) stores it. An ended batch's marker stays
    (`shared.store.ended.KEEP_S`)."""
    return await _finalized(services, batch_id, *await read(services, batch_id))


async def _finalized(
    services: Services, batch_id: str, manifest: Manifest, etag: str, entries: list[ResultEntry]
) -> dict[str, Any] | None:
    if crossed_tolerance(manifest, failed_items(manifest, entries)):  # its drainer died or failed to end it
        await end(services, batch_id, lifecycle.FAILED)
        manifest, etag, entries = await read(services, batch_id)
    status = batch_status(manifest, entries, datetime.now(timezone.utc))
    if status["status"] not in FINAL or manifest.final_status is not None:
        return None
    await quota_gate.release(services, manifest)  # before the stamp: a crash between the two releases it again
    stamped = replace(manifest, final_status=status["status"], finished_at=datetime.now(timezone.utc).isoformat())
    try:
        await write_json(
            services.storage.container(services.settings.batches_container),
            layout.manifest_blob(batch_id),
            stamped.to_json(),
            etag=etag,
        )
    except PreconditionFailed:
        return None  # changed meanwhile (a cancel's end): whoever changed it (or the next look) decides
    log.info("batch %s final: %s (%s)", batch_id, status["status"], status["items"])
    # Only after the stamp won: a notice written before it stated a status a cancel's end could still overturn.
    await notices.batch_final(services, manifest, status)  # none unless it named a callback
    # So that the list shows the stamp (a cancel's end after the last record: `cancelled`) with no manifest read.
    await batch_index.restamp(services.storage.container(services.settings.batches_container), stamped)
    return status


async def noticed(services: Services, batch_id: str) -> bool:
    """For the sweep, of a batch it found without a notice: if it is final (stamped or not), store its notice
    (and stamp it); whether it did. Two storage calls for a batch still running."""
    manifest, etag, entries = await read(services, batch_id)
    if manifest.callback_url is None:
        return False
    if manifest.final_status is None:
        return await _finalized(services, batch_id, manifest, etag, entries) is not None
    status = batch_status(manifest, entries, datetime.now(timezone.utc))
    await notices.batch_final(services, manifest, status)  # stamped by a process that died before its notice
    return True


async def finalize_all(services: Services, batch_ids: Iterable[str]) -> None:
    """After a drain execution: did any batch it recorded results of become final? Best effort (a batch not
    noticed now is noticed by the next execution that records of it, a cancel, a status read, the batch list, or
    for a batch with a callback the timer's sweep), and FINALIZE_S in all: one batch after another, each waiting
    out storage's late answers, held the execution past its budget's margin (the simulation's stale-cancel family,
    two to four batches with their listings answered 5-15 s late: 93 s for a bound of 90). Stopped between a
    stamp and its notice, it leaves what a kill there leaves, which the same callers heal."""
    todo = sorted(batch_ids)
    try:
        async with asyncio.timeout(FINALIZE_S):
            while todo:
                try:
                    await finalize(services, todo[0])
                except (StorageError, NotFound) as e:
                    log.warning("batch %s: could not check whether it became final: %s", todo[0], e)
                todo.pop(0)
    except TimeoutError:
        log.warning("finalize stopped after %d s with %d batch(es) unchecked (the next drain, a status read, the "
                    "list or the timer's sweep finalizes them): %s", FINALIZE_S, len(todo), todo[:5])  # fmt: skip


def checked_status(text: str | None) -> str | None:
    if text is not None and text not in STATUSES:
        raise ValueError(f'"status" must be one of {", ".join(STATUSES)}')
    return text


async def export(
    services: Services, manifest: Manifest, entries: list[ResultEntry], *, status: str | None, start: int, limit: int
) -> AsyncIterator[dict[str, Any]]:
    """The result lines of the batch's items with an outcome, in position order from position `start`, at most
    `limit` of them, only those of `status` if given."""
    if limit <= 0:
        return
    starts = [0, *accumulate(manifest.chunk_sizes)]
    by_chunk: dict[int, list[ResultEntry]] = {}
    for entry in entries:
        if 0 <= entry.chunk < manifest.chunks:
            by_chunk.setdefault(entry.chunk, []).append(entry)
    unstarted = lifecycle.never_started(manifest)
    first = next((c for c in range(manifest.chunks) if starts[c + 1] > start), manifest.chunks)
    results = services.storage.container(services.settings.results_container)
    emitted = 0
    for chunks in _windows(starts, first, start + limit):
        records = await _window_records(results, [e for c in chunks for e in by_chunk.get(c, [])])
        for c in chunks:
            lines = _chunk_lines(records.get(c, []), starts[c], manifest.chunk_sizes[c], unstarted)
            for line in lines:
                if line["position"] < start or (status is not None and line["status"] != status):
                    continue
                yield line
                emitted += 1
                if emitted >= limit:
                    return


def _windows(starts: list[int], first: int, end: int) -> Iterator[range]:
    """The chunks whose records are read together, from chunk `first`: those that hold positions before `end`
    (a page needs no more unless some of its items have no line, or not the status asked for), then
    WINDOW_CHUNKS at a time. So a page of one line reads the blobs of one chunk, not of 256."""
    chunks = len(starts) - 1
    at, size = first, min(WINDOW_CHUNKS, max(1, bisect_left(starts, end, first, chunks) - first))
    while at < chunks:
        yield range(at, min(at + size, chunks))
        at, size = at + size, WINDOW_CHUNKS


async def _window_records(results: Any, wanted: list[ResultEntry]) -> dict[int, list[dict[str, Any]]]:
    """The record documents `wanted` describes, by chunk (each blob read once for the window)."""
    out: dict[int, list[dict[str, Any]]] = {}
    for record in await read_chosen(results, wanted, concurrency=READ_CONCURRENCY):
        out.setdefault(record["chunk"], []).append(record)
    return out


def _chunk_lines(records: list[dict[str, Any]], start: int, size: int, unstarted: bool) -> list[dict[str, Any]]:
    """One line per item of a chunk with an outcome, by position, each by the status route's rule
    (`results.item_outcomes`)."""
    found: dict[int, dict[str, Any]] = {}
    ids: dict[int, Any] = {}
    for record in records:
        ids.update((p, i) for p, i in record.get("ids") or [])
    for p, (kind, detail) in item_outcomes(records, size).items():
        if kind == "failed":
            found[p] = {"status": "failed", "reason": detail}
        elif kind == "ok":
            found[p] = {"status": "succeeded", "value": detail}
        else:
            found[p] = {"status": kind}
    if unstarted:  # final without its chunks run: every item without a record was cancelled
        for p in range(size):
            found.setdefault(p, {"status": "cancelled"})
    lines = []
    for p in sorted(x for x in found if 0 <= x < size):
        line: dict[str, Any] = {"position": start + p}
        if p in ids:
            line["id"] = ids[p]
        lines.append(line | found[p])
    return lines
