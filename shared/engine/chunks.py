"""The drain engine's work on one chunk: decode it, admit it (only the committed attempt of its batch is
worked), load its items (inline or from their claim-check blob) and run the handler on them. What to do
with the outcome (`shared.batch.settlement`) is computed here; doing it is `shared.engine.settling`'s."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from datetime import datetime, timezone
from typing import Any

from azure.storage.blob.aio import ContainerClient
from opentelemetry import trace
from opentelemetry.trace import Link, Span

from shared.batch import envelope, lifecycle
from shared.batch.batches import Admission, Manifest, admit
from shared.batch.envelope import ChunkHeader, ChunkMessage
from shared.batch.lifecycle import ENDED_CHECK_S, ENDED_LISTINGS_MAX
from shared.batch.results import newest, settled_counts
from shared.batch.settlement import ResultRecord, Settlement, discarded, settle
from shared.core import layout
from shared.core.errors import (
    HandlerError,
    MalformedEnvelope,
    NotRun,
    Overloaded,
    ResourceMissing,
    SessionEnding,
    StorageError,
)
from shared.engine import sync_calls
from shared.engine.handler_calls import HandlerCalls
from shared.engine.limits import HandlerLimits
from shared.handlers import ChunkContext, ChunkResult, ItemOutcome, checked, is_async
from shared.services import Services
from shared.store import batch_index, ended
from shared.store.received import Received, epoch_ms, utcnow
from shared.store.result_store import left_unsettled, list_counted, unsettled
from shared.store.storage import read_bytes, read_json
from shared.telemetry import metrics, tracing

log = logging.getLogger("shared.engine.drainer")  # one logger for the whole engine

Worked = tuple[ChunkMessage, list[Any], list[int], Settlement]  # a handled chunk, its items and positions, what to do


class ChunkWork:
    def __init__(
        self,
        services: Services,
        batches: ContainerClient,
        clock: Callable[[], float],
        queue: str = "",
        ending: Callable[[], bool] = lambda: False,
    ) -> None:
        self.s, self.settings, self.batches, self.clock = services, services.settings, batches, clock
        self.queue = queue  # for the metrics' attributes
        self.ending = ending  # the drain session starts no more handler calls (read on a handler's thread too)
        self._manifest_reads: dict[str, asyncio.Future[Manifest]] = {}
        self._index_writes: dict[str, asyncio.Future[None]] = {}
        self._linked: set[str] = set()  # batches the drain session's span links to
        self.limits: HandlerLimits | None = None  # the session's share of the app-wide handler limits
        self._ended_listing: asyncio.Future[None] | None = None
        self._pruning: set[asyncio.Future[int]] = set()  # old ended markers being deleted (held till done)
        self.calls = HandlerCalls()  # the session's handler calls: async ones it can end, sync ones it waits for

    async def admission(self, header: ChunkHeader) -> Admission:
        verdict = await self._committed(header)
        return verdict if verdict is not Admission.PROCESS else await self.lifecycle(header)

    async def lifecycle(self, header: ChunkHeader) -> Admission:
        """A chunk of the committed attempt, by its batch's lifecycle: ended (cancelled, or failed past its
        tolerance) by the ended markers listed at most ENDED_CHECK_S ago; expired or early by its header."""
        if await self._is_ended(header.batch_id):
            return Admission.CANCELLED
        return lifecycle.judged(header, epoch_ms())

    async def _is_ended(self, batch_id: str) -> bool:
        """Whether the process knows the batch ended, by a listing of the ended markers begun at most ENDED_CHECK_S
        ago. A listing knows the markers written before it began, so its time is its start, and it is judged after
        it answered: a listing slowed past the bound (SDK retries) is followed by another; after ENDED_LISTINGS_MAX
        such listings the chunk is left for redelivery (StorageError) rather than run on stale knowledge."""
        known = self.s.ended
        for listings in range(ENDED_LISTINGS_MAX + 1):
            if batch_id in known:  # an ended batch stays ended: no listing needs to be fresh to say so
                return True
            if known.fresh(time.monotonic()):
                return False
            if listings == ENDED_LISTINGS_MAX:
                break
            if self._ended_listing is None:  # one listing for all the chunks that ask meanwhile
                self._ended_listing = asyncio.ensure_future(self._list_ended())
                self._ended_listing.add_done_callback(self._listing_ended)
            await asyncio.shield(self._ended_listing)
        raise StorageError("list ended batches", f"no listing answered within {ENDED_CHECK_S} s of its start")

    def _listing_ended(self, done: asyncio.Future[None]) -> None:
        self._ended_listing = None
        if not done.cancelled():
            done.exception()  # retrieved here too: the chunks that asked may all have been cancelled

    async def _list_ended(self) -> None:
        started, began = time.monotonic(), utcnow()  # its time: it knows every marker written before it began
        state = self.s.storage.container(self.settings.state_container)
        known = self.s.ended
        # After a first listing of every marker, only those written since the previous listing began.
        found = await ended.listed(state, since=known.since, now=began)
        known.listed(found.ids, started, began=began, full=found.full)
        if found.aged:  # markers no cancel pruned in time: deleted aside, so no chunk waits for it
            pruning = asyncio.ensure_future(ended.delete(state, found.aged))
            self._pruning.add(pruning)
            pruning.add_done_callback(self._pruning.discard)

    def _still_runs(self, header: ChunkHeader) -> bool:
        """Judged by a sync handler's thread as it begins the call, with no I/O: the session still starts calls,
        the process's knowledge of ended batches is fresh and does not name the batch, and the chunk's deadline
        has not passed."""
        known = self.s.ended
        if self.ending() or header.batch_id in known or not known.fresh(time.monotonic()):
            return False
        return lifecycle.judged(header, epoch_ms()) is Admission.PROCESS

    async def _committed(self, header: ChunkHeader) -> Admission:
        known = self.s.committed.judge(header.batch_id, header.attempt, now=self.clock())
        if known is not None:
            first = header.chunk == 0 and header.gen == 0
            marked = self.s.committed.take_accepted(header.batch_id) if first else None
            if marked is not None and known:
                self._woke(datetime.fromtimestamp(marked / 1000, timezone.utc))
            return Admission.PROCESS if known else Admission.STALE
        manifest = await self._manifest(header.batch_id)
        verdict = admit(manifest, header.attempt, now=utcnow(), staging_ttl_s=self.settings.staging_ttl_s)
        if verdict is Admission.PROCESS:
            await self._indexed(manifest)
            self.s.committed.put(header.batch_id, manifest.attempt, now=self.clock())
            if header.chunk == 0 and header.gen == 0 and manifest.accepted_at is not None:
                self._woke(datetime.fromisoformat(manifest.accepted_at))
        return verdict

    def _woke(self, accepted_at: datetime) -> None:
        """A batch's first chunk is being handled: how long after its acceptance (the wake latency metric)."""
        waited = utcnow() - accepted_at
        metrics.WAKE_LATENCY.record(max(0.0, waited.total_seconds() * 1000), {"queue": self.queue})

    async def _indexed(self, manifest: Manifest) -> None:
        """A committed batch admitted by its manifest: no lane mark named it, so its submit may have died, or its
        index write failed, after the commit (a submit names its batch in its marks only once it is indexed). Write
        its index entry (`shared.store.batch_index`: the same blob whoever writes it): one PutBlob for all the
        chunks that ask together, once per batch per process while the committed attempt is remembered. Raises
        StorageError like a failed manifest read: the chunk is left for redelivery, so no chunk of a batch is
        handled before the batch is listed."""
        batch_id = manifest.batch_id
        pending = self._index_writes.get(batch_id)
        if pending is None:
            pending = asyncio.ensure_future(batch_index.write(self.batches, manifest))
            self._index_writes[batch_id] = pending

            def written(done: asyncio.Future[None]) -> None:
                self._index_writes.pop(batch_id, None)
                if not done.cancelled():
                    done.exception()  # retrieved here too: the chunks that asked may all have been cancelled

            pending.add_done_callback(written)
        await asyncio.shield(pending)

    async def _manifest(self, batch_id: str) -> Manifest:
        """One read for all the chunks of a batch that arrive together (a staging manifest is read again later)."""
        pending = self._manifest_reads.get(batch_id)
        if pending is None:
            pending = asyncio.ensure_future(self._read_manifest(batch_id))
            self._manifest_reads[batch_id] = pending
            pending.add_done_callback(lambda _: self._manifest_reads.pop(batch_id, None))
        return await asyncio.shield(pending)

    async def _read_manifest(self, batch_id: str) -> Manifest:
        try:
            doc, _ = await read_json(self.batches, layout.manifest_blob(batch_id))
        except ResourceMissing:
            raise MalformedEnvelope(f"batch {batch_id} has no manifest") from None
        return Manifest.from_json(doc)

    async def work(self, item: Received, msg: ChunkMessage) -> Worked:
        """Run the handler on the chunk's items; raises MalformedEnvelope or ResourceMissing if they cannot
        be loaded (the caller parks the message whole)."""
        header = msg.header
        attempt = max(1, int(item.message.dequeue_count or 1) - header.skips)
        attributes = {"queue_drain.batch_id": header.batch_id, "queue_drain.chunk": header.chunk}
        attributes |= {"queue_drain.gen": header.gen, "queue_drain.attempt": attempt, "queue_drain.queue": self.queue}
        with (
            tracing.span(
                "queue_drain.chunk", parent=header.trace, links=self._session_link(header), attributes=attributes
            ) as span,
            tracing.about_batch(header.batch_id),
        ):
            items, positions = await self.load_items(msg)
            placed = tuple(await self._batch_positions(header, positions))
            context = ChunkContext(header.batch_id, header.chunk, attempt, self.settings, placed)
            async with self.limits.admit(len(items), self.ending) if self.limits is not None else nullcontext():
                result = await self._judged_call(header, items, context)
            settlement = settle(
                batch_id=header.batch_id,
                chunk=header.chunk,
                gen=header.gen,
                positions=positions,
                outcomes=result.outcomes,
                attempt=attempt,
                max_attempts=self.settings.max_dequeue_count,
                summary=result.summary,
                items=items,
            )
            self._observe(span, len(items), settlement)
        return msg, items, positions, settlement

    async def recorded(self, item: Received, msg: ChunkMessage) -> list[int] | None:
        """For a delivery that follows one which left the message's text as it was (`ChunkHeader.delivered`): if
        that delivery recorded the chunk's lineage (its update or delete was lost), the positions its record left
        retrying, which this delivery carries on without calling the handler (an outcome once recorded never
        changes: a failure parked is not run again and recorded as a success, nor a value replaced); None
        otherwise. One listing of the batch's results, for such deliveries only, and a read of the record."""
        header = msg.header
        if item.dequeued <= header.delivered + 1:
            return None
        first = min(header.positions, default=0) if header.positions is not None else 0
        container = self.s.storage.container(self.settings.results_container)
        try:
            return await left_unsettled(container, header.batch_id, (header.chunk, header.gen, first), header.positions)
        except ResourceMissing:  # no results container yet: nothing recorded
            return None

    async def discard(self, item: Received, msg: ChunkMessage, verdict: Admission) -> ResultRecord | None:
        """The record of a chunk of an ended or expired batch, its items discarded unrun (a claim-check chunk's
        blob is read once, for its items' ids); None if every item already has an outcome. Raises like `work` if
        its items cannot be loaded. A chunk tried before may have been handled and recorded by a delivery whose
        delete was lost: only the items no record of its lineage settled are discarded (one listing of the
        batch's results and a read of that record, for such chunks only)."""
        items, positions = await self.load_items(msg)
        header = msg.header
        attempt = max(1, int(item.message.dequeue_count or 1) - header.skips)
        why = "expired" if verdict is Admission.EXPIRED else "cancelled"
        if attempt == 1 or not positions:
            return discarded(header.batch_id, header.chunk, header.gen, attempt, positions, items, why=why)
        first = min(positions)
        container = self.s.storage.container(self.settings.results_container)
        left = set(await unsettled(container, header.batch_id, (header.chunk, header.gen, first), positions))
        if not left:
            return None
        kept = [(p, i) for p, i in zip(positions, items, strict=True) if p in left]
        positions, items = [p for p, _ in kept], [i for _, i in kept]
        return discarded(header.batch_id, header.chunk, header.gen, attempt, positions, items, why=why, first=first)

    async def tolerance(self, header: ChunkHeader, record: ResultRecord) -> None:
        """After a chunk recorded failures for good: end its batch `failed` if more than its max_failed_fraction
        of its items have now failed. Costs one manifest read and one listing of its results per such chunk,
        only for batches that set a tolerance, until one ends it."""
        if header.max_failed is None or not record.failed or header.batch_id in self.s.ended:
            return
        settings = self.settings
        try:
            manifest, _ = await ended.read_manifest(self.batches, header.batch_id)
            found = newest(await list_counted(self.s.storage.container(settings.results_container), header.batch_id))
            failed = sum(c["failed"] for c in settled_counts(found, manifest.chunks, manifest.chunk_sizes).values())
            if manifest.ended is None and lifecycle.tripped(failed, manifest.items, manifest.max_failed_fraction):
                state = self.s.storage.container(settings.state_container)
                await ended.end(self.batches, state, header.batch_id, lifecycle.FAILED, utcnow())
                log.warning(
                    "batch %s ended failed: %d of %d item(s) failed, more than max_failed_fraction %g",
                    header.batch_id, failed, manifest.items, manifest.max_failed_fraction,
                )  # fmt: skip
            if manifest.ended is not None or lifecycle.tripped(failed, manifest.items, manifest.max_failed_fraction):
                self.s.ended.add(header.batch_id)
        except (StorageError, ResourceMissing) as e:
            log.warning("batch %s: its failure tolerance could not be checked (the next failure tries): %s",
                        header.batch_id, e)  # fmt: skip

    def _session_link(self, header: ChunkHeader) -> list[Link] | None:
        """The chunk's span lives in its submit's trace and links to the drain session serving it; the session
        links to each batch the first time it serves one."""
        session = trace.get_current_span()
        if header.trace is None or not session.get_span_context().is_valid:
            return None  # an old message without a trace: its span is the session's child instead
        if header.batch_id not in self._linked:
            self._linked.add(header.batch_id)
            found = tracing.link_to(header.trace)
            if found is not None:
                session.add_link(found.context, {"queue_drain.batch_id": header.batch_id})
        return [Link(session.get_span_context())]

    def _observe(self, span: Span, items: int, settlement: Settlement) -> None:
        succeeded, retried, parked = len(settlement.record.ok), len(settlement.retry), len(settlement.poison)
        outcome = "complete" if settlement.complete else "retrying"
        counts = {"items": items, "succeeded": succeeded, "retried": retried, "parked": parked}
        span.set_attributes({f"queue_drain.{k}": n for k, n in counts.items()})
        tracing.set_outcome(span, outcome, ok=not (retried or parked))
        metrics.item_outcomes(succeeded, retried, parked, {"queue": self.queue})
        metrics.CHUNKS.add(1, {"queue": self.queue, "outcome": outcome})

    async def _batch_positions(self, header: ChunkHeader, positions: list[int]) -> list[int]:
        """The items' positions in their batch: the chunk's start (carried by its header) plus each one's place in
        the chunk; a chunk enqueued before headers carried it reads its start from the manifest (one read shared by
        the chunks of its batch that arrive together)."""
        start = header.start
        if start is None:
            start = sum((await self._manifest(header.batch_id)).chunk_sizes[: header.chunk])
        return [start + p for p in positions]

    async def load_items(self, msg: ChunkMessage) -> tuple[list[Any], list[int]]:
        if msg.items is not None:
            return msg.items, msg.positions(len(msg.items))
        assert msg.blob is not None
        everything = envelope.decode_claim_check(await read_bytes(self.batches, msg.blob))
        positions = msg.positions(len(everything))
        return envelope.select(everything, positions), positions

    async def _judged_call(self, header: ChunkHeader, items: list[Any], context: ChunkContext) -> ChunkResult:
        """The handler's call, judged again as it starts (the wait for a place may have outlasted the bound): on
        the loop right before an async handler's call; by a sync handler's thread as it begins the call
        (`shared.engine.sync_calls`), and on the loop again whenever the thread found it must not start.
        Raises NotRun if the batch ended or expired meanwhile, SessionEnding once the session starts no more calls
        (a chunk held while slow calls ran before it waits for the next session: the budget bounds when a session
        stops starting calls, whatever it still holds, and a session whose lease may have lapsed starts none
        beside the next holder's, whose handler limits no longer count its calls)."""
        while True:
            self._not_ending()
            verdict = await self.lifecycle(header)
            if verdict is not Admission.PROCESS:
                raise NotRun(verdict.value)
            self._not_ending()  # again: the lifecycle's listing may have taken the session past its lease's renewal
            result = await self._run_handler(header, items, context)
            if result is not None:
                return result

    def _not_ending(self) -> None:
        if self.ending():
            raise SessionEnding("the drain session starts no more handler calls")

    async def _run_handler(self, header: ChunkHeader, items: list[Any], context: ChunkContext) -> ChunkResult | None:
        """The handler's result; None if a sync handler's thread found the call must not start (judge again)."""
        handler, calls = self.s.handler, self.calls
        try:
            if is_async(handler):
                raw = await calls.endable(handler(items, context))  # type: ignore[arg-type]
            else:
                raw = await calls.on_thread(
                    lambda: handler(items, context), lambda: self._still_runs(header), self.limits
                )
                if raw is sync_calls.NOT_READY:
                    return None
                if asyncio.iscoroutine(raw):
                    raw = await calls.endable(raw)
            return checked(raw, len(items))
        except (asyncio.CancelledError, Overloaded, SessionEnding):
            raise  # overload: the drainer backs off (shared.engine.drainer), no item has an outcome
        except Exception as e:
            # A handler that raises fails every item of the chunk, retryably; the traceback is logged once here.
            log.exception("handler failed on chunk %d of batch %s", context.chunk, context.batch_id)
            reason = f"handler raised {type(e).__name__}: {e}" if not isinstance(e, HandlerError) else str(e)
            return ChunkResult([ItemOutcome.failure(reason[:500])] * len(items))
