"""Replaying parked chunks (what is parked, and how it is listed and inspected, is `shared.ops.parked`).

Nothing here receives from a poison queue (receiving hides a message from every other reader): replay uses the
index the drainers write when they park a chunk (`shared.store.poison_index`), so it costs O(1) storage calls
per chunk whatever the queue's depth.

Replay claims a parked chunk by marking its items as retrying again in the result record that reported them
failed (`shared.ops.replay_marks`: exactly one replay carries them), puts it back on its work queue (its envelope
already names the next generation), rings the doorbell, and only then deletes the poison message and its index
entry. A failure before the chunk is back takes the claim back; a claim left by a replay that died is taken over
by a later replay once it is old (issue 36 item 1). Replaying twice is harmless: the second call finds nothing,
and a replay interrupted midway re-enqueues a chunk whose second result has the same lineage and counts once.
A final batch's parked chunks are never replayed (its outcome never changes): they are set aside.
Chunks parked by a version before the index are listed (first page) and can be inspected
there, but not replayed through the index.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from shared.batch import envelope
from shared.batch.batches import Manifest
from shared.core import lanes
from shared.core.errors import (
    BatchConflict,
    BatchFinal,
    NotFound,
    ReplayConflict,
    ResourceMissing,
    StorageError,
    TriggerUnavailable,
)
from shared.core.events import Reason, TriggerEvent
from shared.engine import lane_queues
from shared.ops import lifecycle
from shared.ops import replay_marks as marks
from shared.ops.parked import Parked, from_entry
from shared.ops.replay_marks import Parent
from shared.ops.status import FINAL, batch_status
from shared.services import Services
from shared.store import claim_fence, poison_index, replay_claims
from shared.store.storage import NEVER_EXPIRES, translated
from shared.watch import lookout

log = logging.getLogger(__name__)
DEFAULT_LIMIT = 1000  # parked chunks one replay call takes at most, unless it asks for fewer
MAX_REPLAY_S = 60  # every replay call stops taking chunks after this long (a paced one: what its rate allows)


async def replay(
    services: Services,
    *,
    batch_id: str | None = None,
    message_ids: set[str] | None = None,
    limit: int = DEFAULT_LIMIT,
    rate: float | None = None,
    exclude: frozenset[str] = frozenset(),
    window_s: float | None = None,
    journal: Journal | None = None,
) -> dict[str, Any]:
    """Replay parked chunks matching `batch_id` and/or `message_ids` (all, when neither is given: the HTTP route
    asks for `"all": true` to mean that), oldest first, at most `limit` of them; with `rate`, at most that many
    chunks per second, so a fixed downstream is not hit by the whole backlog at once. Every call stops taking
    chunks after `window_s` (default MAX_REPLAY_S) whatever its rate, or earlier when a chunk like the longest it
    took would end past that (`Window`), having taken at least one: the answer's
    `more` says to call again for the rest. Each partition's doorbell rings (and its look chain is armed) as its
    first chunk goes back, not after the loop: a call that fails or stops part-way leaves nothing it put back
    unannounced.

    A final batch's outcome never changes, so its parked chunks are never replayed: naming such a batch is a
    409 (`batch_final`; `batch_conflict` for one ended by a cancel or its tolerance), and a chunk of one met
    otherwise is set aside (`shared.store.poison_index.set_aside`): kept for inspection, out of the poison queue
    and of every later replay. Neither what is set aside nor what is left parked counts against `limit`. A
    background step passes its `journal` (`shared.ops.replay_journal`): it writes what was taken before each
    group of chunks."""
    closed: dict[str, Closed | None] = {}
    if batch_id is not None:
        await refuse_closed(services, batch_id, closed)
    window_s = MAX_REPLAY_S if window_s is None else window_s
    pace = Pace(rate)
    if rate is not None:  # what fits in one answer at this pace
        limit = min(limit, 1 + math.floor(window_s * rate))
    window = Window(window_s)
    announcer = Announcer(services)
    replayed: list[dict[str, Any]] = []
    taken = journal.taken if journal is not None else Taken()
    skipped = taken.skipped
    set_aside = 0
    more = False
    state = await services.storage.ensure_container(services.settings.state_container)
    for work_queue in services.settings.partition_queues():
        name = services.settings.poison_queue(work_queue)
        client = await services.storage.ensure_queue(name)
        seen = set(exclude)  # left parked by this call (or by the job's earlier steps): not looked at again
        while not more:
            left = limit - len(replayed)
            if left <= 0:
                more = True
                break
            # Each entry is read as its turn comes, after the clock is looked at: the reads count in the time bound.
            oldest = await poison_index.oldest(
                state, name, batch_id=batch_id, message_ids=message_ids, limit=left, exclude=frozenset(seen)
            )
            if not oldest:
                break
            for n, message_id in enumerate(oldest):
                if journal is not None and n % journal.group == 0:  # not a chunk's time: one write in a group
                    await journal.taking(name, oldest[n : n + journal.group])
                if window.closed(bool(replayed or skipped or set_aside)):
                    more = True
                    break
                seen.add(message_id)
                entry = await poison_index.get(state, name, message_id)
                if entry is None:  # replayed or set aside meanwhile by another call
                    continue
                parked = from_entry(entry)
                if parked.message.chunk_text is None:
                    skipped.append({**parked.summary(), "why": "not a chunk: inspect it and fix it by hand"})
                    continue
                why = await _closed(services, entry.batch_id, closed) if entry.batch_id is not None else None
                if why is not None:
                    await _set_aside(services, client, entry, parked, why)
                    taken.set_aside.append(message_id)
                    set_aside += 1
                    continue
                await pace.next()
                window.begin()  # the wait for its pace is not the chunk's
                try:
                    left_why = await _replay_one(services, client, entry, parked, announcer, work_queue)
                except ReplayConflict as e:
                    left_why = e.message
                if isinstance(left_why, Closed):  # stamped or ended since this call judged it (its claim went back)
                    if entry.batch_id is not None:
                        closed[entry.batch_id] = left_why
                    await _set_aside(services, client, entry, parked, left_why)
                    taken.set_aside.append(message_id)
                    set_aside += 1
                    continue
                if left_why is not None:
                    skipped.append({**parked.summary(), "why": left_why})
                    continue
                replayed.append(parked.summary())
                taken.replayed.append(message_id)
        if more:
            break
    log.warning(
        "replayed %d parked chunk(s) (%d left parked, %d set aside)%s",
        len(replayed), len(skipped), set_aside, "; more left" * more,
    )  # fmt: skip
    out = {"replayed": len(replayed), "skipped": skipped, "set_aside": set_aside, "chunks": replayed, "more": more}
    return out | {"limit": limit, "seconds": round(pace.elapsed(), 3)} | ({"rate": rate} if rate is not None else {})


@dataclass
class Taken:
    """The message ids of what one replay call replayed and set aside, and the chunks it left parked, in order."""

    replayed: list[str] = field(default_factory=list)
    set_aside: list[str] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)


class Journal(Protocol):
    """What a background step writes as it goes (`shared.ops.replay_journal.Journal`)."""

    taken: Taken
    group: int  # chunks taken between two writes

    async def taking(self, poison_queue: str, message_ids: list[str]) -> None: ...


class Closed(Enum):
    """Why a batch's parked chunks are never replayed."""

    ENDED = "its batch was cancelled (or ended by its max_failed_fraction)"
    FINAL = "its batch is final (its outcome never changes)"


async def refuse_closed(services: Services, batch_id: str, known: dict[str, Closed | None] | None = None) -> None:
    """Raise BatchConflict (ended) or BatchFinal (final) for a batch whose parked chunks are never replayed."""
    why = await _closed(services, batch_id, {} if known is None else known)
    if why is Closed.ENDED:
        raise BatchConflict(
            f"batch {batch_id} was cancelled (or ended by its max_failed_fraction): its parked chunks are not "
            "replayable; submit the items again as a new batch",
            batch_id=batch_id,
        )
    if why is Closed.FINAL:
        raise BatchFinal(
            f"batch {batch_id} is final: its outcome is recorded and never changes, so its parked chunks are "
            "not replayed; submit its failed items (the results export with status=failed) as a new batch",
            batch_id=batch_id,
        )


async def _closed(services: Services, batch_id: str, known: dict[str, Closed | None]) -> Closed | None:
    """Is the batch ended or final? One manifest read and one listing of its results per batch per replay."""
    if batch_id not in known:
        try:
            manifest, _, entries = await lifecycle.read(services, batch_id)
        except NotFound:
            known[batch_id] = None  # its manifest is gone (or never was): nothing to keep consistent with
        else:
            known[batch_id] = _why(manifest, batch_status(manifest, entries)["status"] in FINAL)
    return known[batch_id]


def _why(manifest: Manifest, final: bool = False) -> Closed | None:
    """Ended, else final (stamped, or `final` by its records), else open."""
    final = final or manifest.final_status is not None
    return Closed.ENDED if manifest.ended is not None else Closed.FINAL if final else None


async def _set_aside(services: Services, client: Any, entry: poison_index.Entry, parked: Parked, why: Closed) -> None:
    if parked.message.chunk_text is not None:  # a dead replay's claim on it goes back first
        await marks.give_back(services, envelope.decode(parked.message.chunk_text).header)
    state = services.storage.container(services.settings.state_container)
    await poison_index.set_aside(state, entry, f"{why.value}: set aside, never replayed")
    await _unpark(services, client, entry, parked)
    log.info("set aside parked message %s of batch %s: %s", entry.message_id, entry.batch_id, why.value)


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


class Window:
    """When a replay call stops taking chunks: `window_s` after it began, or as soon as what is left of that is
    shorter than the longest chunk it took so far (one begun then would end past the window: a background step's
    claim, STEP_S + CLAIM_MARGIN_S, lapses while storage answers seconds late); always after one chunk at least."""

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.deadline = clock() + window_s
        self.longest = 0.0
        self.began: float | None = None  # when the chunk in hand was begun

    def closed(self, taken: bool) -> bool:
        """Looked at before each chunk (`taken`: it took one already); the chunk before it ends here."""
        now = self.clock()
        if self.began is not None:
            self.longest = max(self.longest, now - self.began)
        if taken and now + self.longest >= self.deadline:
            return True
        self.began = now
        return False

    def begin(self) -> None:
        self.began = self.clock()


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
) -> str | Closed | None:
    """Re-enqueue one parked chunk of `partition` to its lane and announce it; None when done, Closed when its
    batch was stamped final or ended since the call judged it (the claim given back: set it aside), else why it was
    left parked (or, for a stale copy whose items a later attempt settled, deleted)."""
    assert parked.message.chunk_text is not None
    chunk = envelope.decode(parked.message.chunk_text)
    lane = replay_lane(partition, parked.message.info.queue)
    state = services.storage.container(services.settings.state_container)
    # The note comes before the claim and goes once the claim is settled: a replay that dies between leaves it,
    # and the timer finishes the replay (`shared.ops.replay_takeover`).
    note = await replay_claims.write(state, entry.poison_queue, entry.message_id)
    try:
        found, claimed = await marks.claim(services, chunk.header)
    except ReplayConflict:
        await replay_claims.drop(state, note)  # every mark it wrote was refused: it claimed nothing
        raise
    if found is Parent.SETTLED:
        await _unpark(services, client, entry, parked)
        await replay_claims.drop(state, note)
        log.info("deleted a stale parked copy of chunk %d of batch %s from %s",
                 chunk.header.chunk, chunk.header.batch_id, parked.queue)  # fmt: skip
        return "its items were settled by a later attempt: this stale parked copy was deleted"
    if claimed is None:
        await replay_claims.drop(state, note)
        return "its items are no longer failed (it was replayed already, or its record is missing)"
    # The mark is this replay's claim: a concurrent replay of the chunk (or of a duplicate parked copy) finds its
    # items retrying and leaves them. A failure before the chunk is back takes the claim back (the items are
    # failed again); a kill leaves the claim and the note, and the timer takes it over once it is CLAIM_S old.
    # The fence (`shared.store.claim_fence`) makes the claim and a final stamp exclusive: a stamp that came first
    # is met here (the claim goes back, the chunk aside), one that comes later fails on its ETag.
    work = await services.storage.ensure_queue(lane)
    try:
        why = await _fenced(services, chunk.header.batch_id)
        if why is None:
            await announcer.before(lane)
            async with translated(f"re-enqueue to {lane}"):
                await work.send_message(parked.message.chunk_text, time_to_live=NEVER_EXPIRES)
    except Exception:
        if await marks.release(services, chunk.header, claimed):
            await replay_claims.drop(state, note)
        raise
    if why is not None:
        log.warning("chunk %d of batch %s not replayed: %s since this replay judged it",
                    chunk.header.chunk, chunk.header.batch_id, why.name.lower())  # fmt: skip
        if not await marks.release(services, chunk.header, claimed):
            # The mark stays, and so do the note and the parked chunk: the timer's takeover sets it aside.
            return f"its batch is {why.name.lower()}: the timer sets it aside once its claim can be taken over"
        await replay_claims.drop(state, note)
        return why
    await announcer.announce(lane, partition)
    await _unpark(services, client, entry, parked)
    await replay_claims.drop(state, note)
    log.info(
        "replayed chunk %d of batch %s (%d item(s)) from %s",
        chunk.header.chunk, chunk.header.batch_id, parked.message.info.failed, parked.queue,
    )  # fmt: skip
    return None


async def _fenced(services: Services, batch_id: str) -> Closed | None:
    """After a claim: the batch's manifest fenced (`shared.store.claim_fence`), and why it is closed if it is."""
    manifest = await claim_fence.fence(services.storage.container(services.settings.batches_container), batch_id)
    return None if manifest is None else _why(manifest)


async def _unpark(services: Services, client: Any, entry: poison_index.Entry, parked: Parked) -> None:
    try:
        async with translated(f"delete {entry.message_id} from {parked.queue}"):
            await client.delete_message(entry.message_id, pop_receipt=entry.pop_receipt)
    except ResourceMissing:
        log.info("parked message %s was already gone from %s", entry.message_id, parked.queue)
    state = services.storage.container(services.settings.state_container)
    await poison_index.remove(state, parked.queue, entry.message_id)


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
