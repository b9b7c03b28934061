"""A replay's claim on a parked chunk: its items move from `failed` to `retrying` in the parent result record.

The parent generation's record is the one place every replay of a chunk, and of each duplicate parked copy of it,
looks: rewriting it over the version read (its ETag) is what lets exactly one replay carry the items. The mark
also counts them pending again, so it must never outlive a chunk that is not on its way: a replay that fails
before the chunk is back takes it back (`release`), and a mark left by a replay that died (kill -9, a lost
answer) is taken over by a later replay once it is CLAIM_S old (`claim`), instead of leaving the chunk parked and
its items pending for good (issue 36 item 1). A takeover may send a chunk its dead replay had sent already: both
copies record the same lineage, which counts once.

A takeover acts only on a replay's claim: items a replay marked (listed under CLAIMED, stamped CLAIMED_MS), not
items a transient failure left retrying for the next generation. And the carrier of a parked chunk is the record
of its own lineage (chunk, its generation, its first position), not any record of that generation: the chunk's
other items that were retrying go on as a follow-up of the same generation, which carries none of these.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from shared.batch import envelope, results
from shared.batch.results import CLAIMED, CLAIMED_FAILED, CLAIMED_MS, ResultEntry, claimed
from shared.core.errors import PreconditionFailed, ReplayConflict, ResourceMissing, StorageError
from shared.services import Services
from shared.store.result_store import list_entries
from shared.store.storage import read_json, write_json

log = logging.getLogger(__name__)

__all__ = ["CLAIMED", "CLAIMED_MS", "CLAIM_S", "Claim", "Parent", "carrier", "claim", "claimed", "give_back",
           "release", "stale"]  # fmt: skip

MARK_ATTEMPTS = 5  # reads of a parent record that keeps changing under a replay before giving up
CLAIM_S = 300  # a replay's mark older than this, with no record of the lineage it carries, is taken over
LOST_REASON = "failed before a replay that died claimed it (its reason was not kept)"


class Parent(Enum):
    """What a parked chunk's parent result record says of its items."""

    MARKED = "marked"  # they were failed (or held by a replay that died); now retrying, carried by this replay
    SETTLED = "settled"  # a later attempt settled them: the parked copy is stale
    UNSURE = "unsure"  # retrying with no record of the next generation yet (a replay in flight), or no record


@dataclass(frozen=True)
class Claim:
    """The parent record this replay marked (its lineage) and the failures it moved to `retrying` (with their
    reasons, to put back if the chunk does not go back)."""

    entry: ResultEntry
    moved: list[dict[str, Any]] = field(default_factory=list)


async def claim(services: Services, header: envelope.ChunkHeader) -> tuple[Parent, Claim | None]:
    """Mark the chunk's items retrying in the parent generation's record, where they are failed (or held by a
    replay's claim older than CLAIM_S with no record of the lineage it sent): MARKED with the claim. The record
    is rewritten where it is (over the version read), so it stays the newest of its lineage.

    SETTLED when the parent's records hold none of these items as failed and none as retrying without a record
    of the lineage that carries them: replaying would count them twice, and the parked copy is stale. A
    concurrent change of the record (another replay, a redelivery) is met by reading it again; if it keeps
    changing, ReplayConflict, and the chunk stays parked."""
    positions = set(header.positions or [])
    container = services.storage.container(services.settings.results_container)
    for _ in range(MARK_ATTEMPTS):
        listed = results.newest(await list_entries(container, header.batch_id))
        parents = [e for e in listed if (e.chunk, e.gen) == (header.chunk, header.gen - 1)]
        carried = any(e.key == carrier(header) for e in listed)
        now_ms = time.time_ns() // 1_000_000
        held = False  # some of these items retrying, with no record of their carrier yet
        for entry in (e for e in parents if e.failed or (e.retrying and not carried)):
            try:
                doc, etag = await read_json(container, entry.blob)
            except ResourceMissing:
                held = held or bool(entry.retrying)
                continue
            record = results.select(doc, entry)
            if record is None:
                held = held or bool(entry.retrying)
                continue
            moving = [f for f in record["failed"] if f["i"] in positions]
            retrying = positions & set(record["retrying"])
            abandoned = not carried and bool(retrying) and retrying <= claimed(record) and stale(record, now_ms)
            held = held or (bool(retrying) and not carried)
            if not moving and not abandoned:
                continue
            record["failed"] = [f for f in record["failed"] if f["i"] not in positions]
            record["retrying"] = sorted(set(record["retrying"]) | {f["i"] for f in moving})
            record[CLAIMED] = sorted(claimed(record) | {f["i"] for f in moving})
            record[CLAIMED_MS] = now_ms
            kept = [f for f in record.get(CLAIMED_FAILED, []) if f["i"] not in {m["i"] for m in moving}]
            record[CLAIMED_FAILED] = sorted([*kept, *moving], key=lambda f: int(f["i"]))
            try:
                await write_json(container, entry.blob, doc, etag=etag, metadata=results.blob_metadata(doc))
            except PreconditionFailed:
                log.warning("result blob %s changed while replaying; reading it again", entry.blob)
                break  # read the lineage again from the listing
            if abandoned:
                log.warning("chunk %d of batch %s: taking over a replay's mark older than %d s",
                            header.chunk, header.batch_id, CLAIM_S)  # fmt: skip
            return Parent.MARKED, Claim(entry, moving)
        else:
            return (Parent.UNSURE if not parents or held else Parent.SETTLED), None
    raise ReplayConflict(
        f"the result record of chunk {header.chunk} of batch {header.batch_id} kept changing; replay it again",
        batch_id=header.batch_id,
    )


def carrier(header: envelope.ChunkHeader) -> results.Key:
    """The lineage whose record carries a parked chunk's items once it is replayed (its own, as the drain keys it:
    chunk, generation, first position)."""
    return header.chunk, header.gen, min(header.positions or [0])


def stale(record: dict[str, Any], now_ms: int) -> bool:
    """The replay's claim on `record` is older than CLAIM_S: its replay died, and another may take it over."""
    return int(record[CLAIMED_MS]) + CLAIM_S * 1000 < now_ms


async def release(services: Services, header: envelope.ChunkHeader, claimed: Claim) -> bool:
    """The chunk did not go back: its moved items are failed again, with their reasons (best effort: a mark left
    behind is taken over after CLAIM_S). False when the mark stays: a takeover of a dead replay's mark moved no
    reasons to put back, so its mark stays for the next takeover."""
    if not claimed.moved:
        return False
    container = services.storage.container(services.settings.results_container)
    moved = {f["i"]: f for f in claimed.moved}
    try:
        for _ in range(MARK_ATTEMPTS):
            doc, etag = await read_json(container, claimed.entry.blob)
            record = results.select(doc, claimed.entry)
            if record is None:
                return True
            back = [moved[i] for i in record["retrying"] if i in moved]
            record["retrying"] = [i for i in record["retrying"] if i not in moved]
            if CLAIMED in record:
                record[CLAIMED] = [i for i in record[CLAIMED] if i not in moved]
            if CLAIMED_FAILED in record:
                record[CLAIMED_FAILED] = [f for f in record[CLAIMED_FAILED] if f["i"] not in moved]
            record["failed"] = sorted([*record["failed"], *back], key=lambda f: int(f["i"]))
            try:
                await write_json(container, claimed.entry.blob, doc, etag=etag, metadata=results.blob_metadata(doc))
            except PreconditionFailed:
                continue
            return True
    except StorageError as e:
        log.warning("chunk %d of batch %s: its replay's mark stays (the timer takes it over after %d s): %s",
                    header.chunk, header.batch_id, CLAIM_S, e)  # fmt: skip
    return False


async def give_back(services: Services, header: envelope.ChunkHeader) -> None:
    """A parked chunk of an ended or final batch is set aside, never replayed: a dead replay's claim on its items
    (older than CLAIM_S, nothing carrying them) would hold them pending for good and its batch `cancelling` (or
    `processing` under a final stamp: a finalize that listed before the claim stamped after it, and the replay died
    before its fence). Its failures go
    back as they were (kept with the claim; one claimed before they were kept is failed with a reason that says
    so). A fresh claim is left alone: its replay's chunk, if it went back, is discarded by its drainer and records
    them. Raises StorageError (the chunk then stays parked, for the next replay or the timer)."""
    positions = set(header.positions or [])
    container = services.storage.container(services.settings.results_container)
    for _ in range(MARK_ATTEMPTS):
        listed = results.newest(await list_entries(container, header.batch_id))
        if any(e.key == carrier(header) for e in listed):
            return
        now_ms = time.time_ns() // 1_000_000
        for entry in (e for e in listed if (e.chunk, e.gen) == (header.chunk, header.gen - 1) and e.retrying):
            try:
                doc, etag = await read_json(container, entry.blob)
            except ResourceMissing:
                continue
            record = results.select(doc, entry)
            held = positions & set(record["retrying"]) & claimed(record) if record is not None else set()
            if record is None or not held or not stale(record, now_ms):
                continue
            kept = {f["i"]: f for f in record.get(CLAIMED_FAILED, [])}
            back = [kept.get(i) or {"i": i, "reason": LOST_REASON} for i in sorted(held)]
            record["retrying"] = [i for i in record["retrying"] if i not in held]
            record[CLAIMED] = [i for i in record.get(CLAIMED, []) if i not in held]
            record[CLAIMED_FAILED] = [f for f in record.get(CLAIMED_FAILED, []) if f["i"] not in held]
            record["failed"] = sorted([*record["failed"], *back], key=lambda f: int(f["i"]))
            try:
                await write_json(container, entry.blob, doc, etag=etag, metadata=results.blob_metadata(doc))
            except PreconditionFailed:
                break  # read the lineage again
            log.warning("chunk %d of batch %s: a dead replay's claim on %d item(s) given back (its batch ended)",
                        header.chunk, header.batch_id, len(back))  # fmt: skip
        else:
            return
