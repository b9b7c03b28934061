"""Result blobs in storage: the drain's group commit, and reading them back (I/O around `shared.batch.results`)."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from azure.storage.blob.aio import ContainerClient

from shared.batch import results
from shared.batch.results import ResultEntry
from shared.batch.settlement import ResultRecord
from shared.core import layout
from shared.core.errors import ResourceMissing
from shared.store.storage import read_json, translated, write_json


class ResultWriter:
    """Group commit: a record waits only for the write in flight for its batch, then goes out with every
    record that settled meanwhile, in one blob. A lone record is written at once; under load one PutBlob
    carries many (up to `max_records`). `write` returns once the record is stored, or raises what the
    write raised (a `StorageError`): the caller then leaves its message to be redelivered."""

    def __init__(
        self,
        container: ContainerClient,
        *,
        max_records: int = results.MAX_RECORDS_PER_BLOB,
    ) -> None:
        self._container = container
        self._max = max_records
        self._waiting: dict[str, list[tuple[ResultRecord, asyncio.Future[None]]]] = {}
        self._flushing: dict[str, asyncio.Task[None]] = {}

    async def write(self, record: ResultRecord) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(record.batch_id, []).append((record, done))
        if record.batch_id not in self._flushing:
            task = asyncio.create_task(self._flush(record.batch_id), name=f"results of {record.batch_id}")
            self._flushing[record.batch_id] = task
        await done

    async def _flush(self, batch_id: str) -> None:
        try:
            while waiting := self._waiting.get(batch_id):
                group, waiting[:] = waiting[: self._max], waiting[self._max :]
                try:
                    await self._put(batch_id, [record for record, _ in group])
                except asyncio.CancelledError:
                    for _, done in group:
                        done.cancel()
                    raise
                except Exception as e:
                    for _, done in group:
                        if not done.done():
                            done.set_exception(e)
                else:
                    for _, done in group:
                        if not done.done():
                            done.set_result(None)
        finally:
            self._flushing.pop(batch_id, None)
            for _, done in self._waiting.pop(batch_id, []):  # only when cancelled: nobody writes these now
                done.cancel()

    async def _put(self, batch_id: str, records: list[ResultRecord]) -> None:
        name = layout.result_group_blob(batch_id, int(time.time() * 1000), secrets.token_hex(4))
        doc = results.group_document(batch_id, records, datetime.now(timezone.utc).isoformat())
        plain = not any(r.holds_values for r in records)  # the common group: positions and ids, no value
        await write_json(self._container, name, doc, metadata=results.blob_metadata(doc), plain=plain)

    async def cancel(self) -> None:
        """Stop writing (a cancelled session): records not yet written are not, and their messages return."""
        tasks = list(self._flushing.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # A flush cancelled before it ever ran never reached its `finally`: nobody may be left waiting.
        self._flushing.clear()
        for waiting in self._waiting.values():
            for _, done in waiting:
                done.cancel()
        self._waiting.clear()


async def list_entries(container: ContainerClient, batch_id: str) -> list[ResultEntry]:
    """Every record of a batch, a lineage recorded twice included (`results.newest` picks), from one listing
    with metadata, no reads."""
    found: list[ResultEntry] = []
    prefix = layout.results_prefix(batch_id)
    try:
        async with translated(f"list results of {batch_id}"):
            async for blob in container.list_blobs(name_starts_with=prefix, include=["metadata"]):
                found.extend(results.entries(blob.name, blob.metadata or {}, blob.last_modified))
    except ResourceMissing:
        pass  # no result was ever written
    return found


async def list_counted(container: ContainerClient, batch_id: str) -> list[ResultEntry]:
    """`list_entries` as the counts are read (the status route, the batch list, finalize, the failure
    tolerance): a chunk whose listing cannot tell its counts (`results.apart`: two copies of its message handled
    at once) has its records read and its entries counted by position (`results.told`), so the counts agree with
    the export. One listing; and a read per blob of such a chunk, which a PutMessage applied twice makes."""
    found = await list_entries(container, batch_id)
    apart = results.apart(found)
    if not apart:
        return found
    chosen = results.newest(found)
    kept = [e for e in chosen if e.chunk not in apart]
    for chunk in sorted(apart):
        mine = [replace(e, also=results.older(found, e)) for e in chosen if e.chunk == chunk]
        docs = await read_chosen(container, mine)
        if len(docs) != len(mine):  # a record gone from its blob: counted from the listing, as before
            kept.extend(mine)
            continue
        kept.extend(results.told(mine, docs))
    return kept


async def unsettled(container: ContainerClient, batch_id: str, key: results.Key, positions: list[int]) -> list[int]:
    """Of `positions` (a chunk message's, about to be discarded unrun), those no record of its lineage `key` has
    settled: a delivery of it may have been recorded before its delete was lost, and an outcome once recorded
    stays. One listing of the batch's results, and a read of the record when its lineage has one."""
    chosen = [e for e in results.newest(await list_entries(container, batch_id)) if e.key == key]
    settled: set[int] = set()
    for record in await read_chosen(container, chosen):
        settled.update(results.settled_positions(record))
    return [p for p in positions if p not in settled]


async def left_unsettled(
    container: ContainerClient, batch_id: str, key: results.Key, positions: Sequence[int] | None
) -> list[int] | None:
    """Where a delivery of a chunk message recorded its lineage `key` (and its update or delete was then lost): of
    `positions` (None: every position that record holds), those it did not settle (it left them retrying) and no
    replay claimed (a replay carries those: their failure was parked, the parked chunk replayed); None where the
    lineage has no record. One listing of the batch's results, and a read of the record when it has one."""
    chosen = [e for e in results.newest(await list_entries(container, batch_id)) if e.key == key]
    records = await read_chosen(container, chosen) if chosen else []
    if not records:
        return None
    settled = results.settled_positions(records[0]) | results.claimed(records[0])
    held = positions if positions is not None else [*settled, *(records[0].get("retrying") or [])]
    return sorted({p for p in held if p not in settled})


async def read_records(container: ContainerClient, batch_id: str) -> list[dict[str, Any]]:
    """The record document of each lineage of a batch as it counts (`results.newest`): one listing, one read per
    blob holding one."""
    return await read_chosen(container, results.newest(await list_entries(container, batch_id)))


async def read_chosen(
    container: ContainerClient, chosen: list[ResultEntry], *, concurrency: int = 1
) -> list[dict[str, Any]]:
    """The documents of the entries `results.newest` chose (a handled record with the later discard that settled
    what it left retrying), each blob read once, at most `concurrency` at a time."""
    names = sorted(
        {e.blob for e in chosen}
        | {e.then.blob for e in chosen if e.then is not None}
        | {a.blob for e in chosen for a in e.also}
    )
    gate = asyncio.Semaphore(concurrency)

    async def one(name: str) -> dict[str, Any]:
        async with gate:
            doc: dict[str, Any] = (await read_json(container, name))[0]
        return doc

    docs = dict(zip(names, await asyncio.gather(*(one(name) for name in names)), strict=True))
    records = []
    for entry in chosen:
        record = results.select(docs[entry.blob], entry)
        if record is None:
            continue
        if entry.also:  # two copies recorded the lineage apart: merged by position
            older = [results.select(docs[a.blob], a) for a in entry.also]
            record = results.merged([*(r for r in older if r is not None), record])
        discard = results.select(docs[entry.then.blob], entry.then) if entry.then is not None else None
        records.append(results.covered(record, discard))
    return records
