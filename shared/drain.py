"""The drain engine: push-driven batch draining of one storage queue with best-effort completion.

A drain session holds the queue slot's lease, runs several receivers of up to 32 messages each,
processes chunks concurrently and settles each: delete on success, rewrite to hold only the failed
items (retried later), or park them in the poison queue. It stops when the queue is empty or its
time budget is spent; then it releases the lease and looks once more, so no wake-up is lost.
It never sleeps waiting for work.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from azure.storage.queue import QueueMessage

from shared import envelope, layout, metering, poison, poison_index
from shared.activity import ACTIVITY
from shared.backoff import retry_delay_ms
from shared.batches import Admission, Manifest, admit
from shared.envelope import ChunkHeader, ChunkMessage
from shared.errors import (
    HandlerError,
    MalformedEnvelope,
    ResourceMissing,
    StorageError,
    TriggerUnavailable,
)
from shared.events import Reason, TriggerEvent
from shared.handlers import ChunkContext, ChunkResult, ItemOutcome, checked, is_async
from shared.leases import DrainLease, queue_leases
from shared.rates import REPORT_FROM_PER_S, RateMeter, advice
from shared.result_store import ResultWriter
from shared.runtime import Services
from shared.scaling import deserves_slot, drainers_for_depth, wakeup_for
from shared.settings import INLINE_MAX_BYTES, QUEUE_MESSAGE_MAX_BYTES
from shared.settlement import Failure, Settlement, settle
from shared.storage import NEVER_EXPIRES, read_bytes, read_json, translated, write_bytes

log = logging.getLogger(__name__)

SCALE_CHECK_S = 5.0
RETRY_WINDOW_MS = 5_000
# A wake-up is scheduled this long after the time its message becomes visible again: the visibility is set by
# storage's clock and the event's enqueue time by Service Bus's, both from ours, so they may differ by a
# second or two; an early wake-up would find nothing and leave the message waiting for the fallback.
WAKE_MARGIN_MS = 3_000
WATCHDOG_MARGIN_S = 5
MAX_WAIT_DELAY_S = 60
STORAGE_RETRY_S = 10


Worked = tuple[ChunkMessage, list[Any], list[int], Settlement]  # a handled chunk, its items and positions, what to do


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class DrainReport:
    queue: str
    slot: int
    reason: str
    outcome: str = "empty"  # empty | budget | lease-taken | busy-here | lease-lost | storage-failed
    sessions: int = 0
    messages: int = 0
    chunks_done: int = 0
    items_ok: int = 0
    items_failed: int = 0
    items_retried: int = 0
    stale: int = 0
    waiting: int = 0
    seconds: float = 0.0
    transactions: dict[str, int] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)

    @property
    def transaction_total(self) -> int:
        return sum(self.transactions.values())

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {"transaction_total": self.transaction_total}


@dataclass
class Received:
    """A received message; `pop_receipt` changes whenever its visibility is extended, so every operation
    that uses it holds `lock`."""

    message: QueueMessage
    received_at: float
    visible_at_ms: int = 0  # when it reappears if we do nothing more (wall clock, ms)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def pop_receipt(self) -> str:
        return str(self.message.pop_receipt)


class Drainer:
    def __init__(
        self,
        services: Services,
        queue: str,
        *,
        slot: int = 0,
        reason: Reason = Reason.SUBMITTED,
        budget_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.s = services
        self.settings = services.settings
        self.queue_name = queue
        self.slot = slot
        self.clock = clock
        self.deadline = clock() + (budget_s if budget_s is not None else self.settings.drain_budget_s)
        self.report = DrainReport(queue, slot, reason.value)
        self._wakeups: list[int] = []  # retry-due events scheduled by this drainer (wall clock, ms)
        self._latest_visible_ms = 0  # the latest time any message this drainer hid becomes visible again
        self._lease_held_until: datetime | None = None  # a lease this drainer could not release expires then
        # (sequence number, due on the monotonic clock, due on the wall clock in ms)
        self._watchdog: tuple[int, float, int] | None = None
        self._recruited = 1
        self._last_scale_check = -math.inf
        self._random = random.Random()
        self._storage_failed = False
        self._manifest_reads: dict[str, asyncio.Future[Manifest]] = {}
        self._meter = RateMeter(clock)
        self._rate_written = 0.0
        self._rate_warned = False

    # -- the session -----------------------------------------------------------------------------------------

    async def run(self) -> DrainReport:
        key = (self.queue_name, self.slot)
        if key in self.s.draining:
            self.report.outcome = "busy-here"
            return self.report
        started = self.clock()
        with metering.tally() as tally:
            try:
                await self._run(key)
            finally:
                self.report.seconds = round(self.clock() - started, 3)
                self.report.transactions = dict(sorted(tally.items()))
        self._log_report()
        return self.report

    async def _run(self, key: tuple[str, int]) -> None:
        self.queue = await self.s.storage.ensure_queue(self.queue_name)
        self.state = await self.s.storage.ensure_container(self.settings.state_container)
        self.results = ResultWriter(await self.s.storage.ensure_container(self.settings.results_container))
        self.batches = await self.s.storage.ensure_container(self.settings.batches_container)
        self.poison_queue = await self.s.storage.ensure_queue(self.settings.poison_queue(self.queue_name))
        while True:
            self.s.draining.add(key)
            try:
                more = await self._session()
            finally:
                self.s.draining.discard(key)
            if self._lease_held_until is not None:
                # Our own lease outlives us (its release failed, or renewal did and it may still be valid): a
                # follow-up now would find it taken and stop, so the follow-up comes when it has expired.
                await self._publish(Reason.CONTINUE, slot=self.slot, at=self._lease_held_until)
                self.report.outcome = "lease-unreleased"
                return
            if more is None:  # the lease is someone else's: they will look again after releasing it
                return
            if more or self._out_of_time():
                if self._storage_failed:
                    # Storage is failing: come back a little later rather than spin on it.
                    later = utcnow() + timedelta(seconds=STORAGE_RETRY_S)
                    await self._publish(Reason.CONTINUE, slot=self.slot, at=later)
                    self.report.outcome = "storage-failed"
                elif more and not await self._still_deserved():
                    self.report.outcome = "shrunk"  # the backlog no longer needs this slot's instance
                elif more:
                    await self._publish(Reason.CONTINUE, slot=self.slot)
                    self.report.outcome = "budget" if self._out_of_time() else "lease-lost"
                return
            # No lost wake-up: work that arrived while we held the lease is seen here.
            if not await self._has_visible_work():
                return

    async def _session(self) -> bool | None:
        """One lease tenure. None: lease taken; True: work may remain; False: the queue looked empty."""
        lease = DrainLease(self.state, self.queue_name, self.slot, lease_s=self.settings.lease_s)
        self._meter = RateMeter(self.clock)
        if not await lease.acquire(on_renew=lambda: self._at_renewal(lease)):
            if self.report.sessions == 0:
                self.report.outcome = "lease-taken"
            return None
        self.report.sessions += 1
        # Scheduled alongside the first receive, not before it: a Service Bus round trip off the wake-up path.
        watchdog = asyncio.create_task(self._schedule_watchdog(), name=f"watchdog {self.queue_name}/{self.slot}")
        try:
            more = await self._drain(lease)
        finally:
            await lease.release()
            if not lease.released:
                self._lease_held_until = lease.expires_at + timedelta(milliseconds=WAKE_MARGIN_MS)
        # Only a session that ends without being cancelled or crashing withdraws its watchdog.
        await watchdog
        await self._cancel_watchdog()
        return more or lease.lost.is_set()

    async def _drain(self, lease: DrainLease) -> bool:
        """Receivers start at one and grow (up to RECEIVERS) while pages come back full."""
        self._slots = asyncio.Semaphore(self.settings.chunk_concurrency)
        self._receivers: set[asyncio.Task[str]] = set()
        self._spawn_receiver(lease)
        more = False
        try:
            while self._receivers:
                done, _ = await asyncio.wait(self._receivers, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    self._receivers.discard(task)
                    ending = task.result()
                    more = more or ending != "empty"
                    if ending == "failed":
                        self._storage_failed = True
        finally:
            # Cancelled (the function timed out) or failed: no receiver may outlive the session and its lease.
            for task in self._receivers:
                task.cancel()
            await asyncio.gather(*self._receivers, return_exceptions=True)
            await self.results.cancel()
        return more

    def _spawn_receiver(self, lease: DrainLease) -> None:
        n = len(self._receivers)
        task = asyncio.create_task(self._receive_loop(lease), name=f"receiver {self.queue_name}/{self.slot}/{n}")
        self._receivers.add(task)

    async def _receive_loop(self, lease: DrainLease) -> str:
        """Receive pages until one comes back empty ('empty'), or out of time or lease ('more'), or storage
        fails ('failed'); each page's chunks are processed concurrently before the next receive."""
        while True:
            if self._out_of_time() or lease.lost.is_set():
                return "more"
            try:
                page = await self._receive()
            except StorageError as e:
                log.warning("receiving from %s failed; ending this session: %s", self.queue_name, e)
                return "failed"
            if not page:
                return "empty"
            self.report.messages += len(page)
            self._meter.add(len(page))
            if len(page) == self.settings.receive_batch:
                # Grow only while the handlers keep up: a receiver whose page would wait for a chunk slot
                # only hides messages that another instance's drainer could be working on.
                if len(self._receivers) < self.settings.receivers and not self._slots.locked():
                    self._spawn_receiver(lease)
                await self._maybe_scale_out()
            await asyncio.gather(*(self._handle(item) for item in page))

    def _out_of_time(self) -> bool:
        return self.clock() >= self.deadline

    async def _receive(self) -> list[Received]:
        async with translated(f"receive from {self.queue_name}"):
            pager = self.queue.receive_messages(
                messages_per_page=self.settings.receive_batch,
                visibility_timeout=self.settings.visibility_timeout_s,
            ).by_page()
            try:
                page = await pager.__anext__()  # exactly one GetMessages
            except StopAsyncIteration:  # the SDK's way of saying the queue had nothing visible
                return []
            visible_at = self._epoch_ms() + self.settings.visibility_timeout_s * 1000
            received = [Received(m, self.clock(), visible_at) async for m in page]
            self._note_visible(visible_at)
            return received

    async def _has_visible_work(self) -> bool:
        async with translated(f"peek {self.queue_name}"):
            return bool(await self.queue.peek_messages(max_messages=1))

    # -- one message --------------------------------------------------------------------------------------

    async def _handle(self, item: Received) -> None:
        """Process one message, keeping it invisible while it waits and works; never raise."""
        try:
            await self._keeping_invisible(item, self._process(item))
        except asyncio.CancelledError:
            raise
        except StorageError as e:
            # The message reappears after its visibility timeout and is tried again: a wake-up for then.
            log.warning("chunk message %s on %s left for redelivery: %s", item.message.id, self.queue_name, e)
            await self._wake_at(item.visible_at_ms)
        except Exception:
            log.exception("chunk message %s on %s failed unexpectedly", item.message.id, self.queue_name)

    async def _keeping_invisible(self, item: Received, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        vis = self.settings.visibility_timeout_s
        try:
            while True:
                wait = max(0.1, item.received_at + vis * 0.6 - self.clock())
                done, _ = await asyncio.wait({task}, timeout=wait)
                if done:
                    task.result()
                    return
                async with item.lock, translated(f"extend visibility of {item.message.id}"):
                    if task.done():
                        continue
                    updated = await self.queue.update_message(
                        item.message, pop_receipt=item.pop_receipt, visibility_timeout=vis
                    )
                    item.message.pop_receipt = updated.pop_receipt
                item.received_at = self.clock()
                item.visible_at_ms = self._epoch_ms() + vis * 1000
                self._note_visible(item.visible_at_ms)
        finally:
            if not task.done():
                task.cancel()
            # Also when it failed just as extending did: its error is superseded, never left unretrieved.
            await asyncio.gather(task, return_exceptions=True)

    async def _process(self, item: Received) -> None:
        """Decode, admit and run the handler holding a slot (CHUNK_CONCURRENCY); settle after releasing it,
        so storage round trips never keep another chunk from its handler."""
        async with self._slots:
            worked = await self._admit_and_work(item)
        if worked is not None:
            await self._settle(item, *worked)

    async def _admit_and_work(self, item: Received) -> Worked | None:
        try:
            msg = envelope.decode(str(item.message.content))
            verdict = await self._admission(msg.header)
        except MalformedEnvelope as e:
            await self._poison_raw(item, str(e))
            return None
        if verdict is Admission.STALE:
            self.report.stale += 1
            await self._delete(item)
            return None
        if verdict is Admission.WAIT:
            await self._put_back(item, msg)
            return None
        if verdict is Admission.ABANDONED:
            log.warning(
                "discarding chunk %d of batch %s: its submission never completed (STAGING_TTL_S)",
                msg.header.chunk,
                msg.header.batch_id,
            )
            await self._delete(item)
            return None
        return await self._work(item, msg)

    async def _admission(self, header: ChunkHeader) -> Admission:
        committed = self.s.committed.get(header.batch_id, now=self.clock())
        if committed is not None:
            return Admission.PROCESS if committed == header.attempt else Admission.STALE
        manifest = await self._manifest(header.batch_id)
        verdict = admit(manifest, header.attempt, now=utcnow(), staging_ttl_s=self.settings.staging_ttl_s)
        if verdict is Admission.PROCESS:
            self.s.committed.put(header.batch_id, manifest.attempt, now=self.clock())
        return verdict

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

    async def _work(self, item: Received, msg: ChunkMessage) -> Worked | None:
        header = msg.header
        try:
            items, positions = await self._load_items(msg)
        except (MalformedEnvelope, ResourceMissing) as e:
            await self._poison_raw(item, f"chunk {header.chunk} of batch {header.batch_id}: {e}")
            return None
        attempt = max(1, int(item.message.dequeue_count or 1) - header.skips)
        result = await self._run_handler(items, ChunkContext(header.batch_id, header.chunk, attempt, self.settings))
        settlement = settle(
            batch_id=header.batch_id,
            chunk=header.chunk,
            gen=header.gen,
            positions=positions,
            outcomes=result.outcomes,
            attempt=attempt,
            max_attempts=self.settings.max_dequeue_count,
            summary=result.summary,
        )
        return msg, items, positions, settlement

    async def _load_items(self, msg: ChunkMessage) -> tuple[list[Any], list[int]]:
        if msg.items is not None:
            return msg.items, msg.positions(len(msg.items))
        assert msg.blob is not None
        everything = envelope.decode_claim_check(await read_bytes(self.batches, msg.blob))
        positions = msg.positions(len(everything))
        return envelope.select(everything, positions), positions

    async def _run_handler(self, items: list[Any], context: ChunkContext) -> ChunkResult:
        handler = self.s.handler
        try:
            if is_async(handler):
                raw = await handler(items, context)  # type: ignore[misc]
            else:
                raw = await asyncio.to_thread(handler, items, context)
                if asyncio.iscoroutine(raw):
                    raw = await raw
            return checked(raw, len(items))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            # A handler that raises fails every item of the chunk, retryably; the traceback is logged once here.
            log.exception("handler failed on chunk %d of batch %s", context.chunk, context.batch_id)
            reason = f"handler raised {type(e).__name__}: {e}" if not isinstance(e, HandlerError) else str(e)
            return ChunkResult([ItemOutcome.failure(reason[:500])] * len(items))

    # -- settling -------------------------------------------------------------------------------------------

    async def _settle(
        self, item: Received, msg: ChunkMessage, items: list[Any], positions: list[int], s: Settlement
    ) -> None:
        """Poison first, then the result record, then the message: a crash in between repeats, never loses."""
        header = msg.header
        record = s.record
        # Only failed items travel on: the common all-ok chunk never needs its items by position.
        by_position = dict(zip(positions, items, strict=True)) if s.poison or s.retry else {}
        if s.poison:
            await self._send_poison(msg, by_position, s.poison, record.attempt)
        await self.results.write(record)
        self.report.items_ok += len(record.ok)
        self.report.items_failed += len(record.failed)
        ACTIVITY.settled(len(record.ok), len(record.failed))
        if s.retry:
            delay_ms = retry_delay_ms(
                record.attempt,
                base_ms=self.settings.retry_base_delay_ms,
                max_ms=self.settings.retry_max_delay_ms,
                jitter=self.settings.retry_jitter,
                u=self._random.random(),
            )
            text = await self._carry_on(msg, envelope.retry_header(header, s.retry), by_position)
            # Visibility is whole seconds: the wake-up must not come before the message is visible again.
            visible_s = math.ceil(delay_ms / 1000)
            if await self._update(item, text, visible_s):
                await self._wake_at(item.visible_at_ms)
            self.report.items_retried += len(s.retry)
            log.info(
                "chunk %d of batch %s: %d ok, %d poisoned, %d retried in %d ms (attempt %d)",
                header.chunk, header.batch_id, len(record.ok), len(record.failed), len(s.retry), delay_ms,
                record.attempt,
            )  # fmt: skip
        else:
            await self._delete(item)
            self.report.chunks_done += 1

    async def _carry_on(self, msg: ChunkMessage, header: ChunkHeader, by_position: dict[int, Any]) -> str:
        """The message text that carries `header.positions` on: a reference to the same claim check, or the
        items inline, or (if even compressed they do not fit) a new claim-check blob."""
        if msg.blob is not None:
            return envelope.encode_reference(header, msg.blob)
        assert header.positions is not None
        items = envelope.encode_items([by_position[p] for p in header.positions])
        text = envelope.encode_inline(header, items, max_bytes=INLINE_MAX_BYTES - poison.POISON_OVERHEAD_BYTES)
        if text is not None:
            return text
        # Too big even compressed: a claim check of its own, holding each item at its original position (the
        # others null), so the message keeps its lineage (generation, positions) whatever its encoding.
        blob = layout.claim_check_blob(header.batch_id, header.chunk, header.gen, first=header.positions[0])
        at_positions = ["null"] * (max(header.positions) + 1)
        for position, item in zip(header.positions, items, strict=True):
            at_positions[position] = item
        await write_bytes(self.batches, blob, envelope.encode_claim_check(at_positions), gzip_json=True)
        return envelope.encode_reference(header, blob)

    async def _send_poison(
        self, msg: ChunkMessage, by_position: dict[int, Any], failures: list[Failure], attempt: int
    ) -> None:
        header = envelope.retry_header(msg.header, [f.position for f in failures])
        chunk_text = await self._carry_on(msg, header, by_position)
        first = failures[0].reason
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        info = poison.PoisonInfo(self.queue_name, first + more, len(failures), attempt, utcnow().isoformat())
        await self._park(poison.encode(info, chunk_text), header.batch_id)
        log.warning(
            "poisoned %d item(s) of chunk %d of batch %s to %s: %s",
            len(failures), header.chunk, header.batch_id, self.poison_queue.queue_name, first + more,
        )  # fmt: skip

    async def _poison_raw(self, item: Received, reason: str) -> None:
        """A message that cannot be worked at all goes to the poison queue whole, never dropped."""
        info = poison.PoisonInfo(self.queue_name, reason, 0, int(item.message.dequeue_count or 1), utcnow().isoformat())
        text = poison.encode_raw(info, str(item.message.content))
        if len(text) > QUEUE_MESSAGE_MAX_BYTES:
            blob = f"poison-raw/{self.queue_name}/{item.message.id}.txt"
            await write_bytes(self.batches, blob, str(item.message.content).encode("utf-8"))
            text = poison.encode_raw(info, json.dumps({"blob": blob}))
        await self._park(text, None)
        log.warning("message %s of %s moved to the poison queue: %s", item.message.id, self.queue_name, reason)
        await self._delete(item)

    async def _park(self, text: str, batch_id: str | None) -> None:
        """Send to the poison queue, then index it (`shared.poison_index`), so that operators find it
        without receiving (hiding) anything."""
        name = self.poison_queue.queue_name
        async with translated(f"send to {name}"):
            sent = await self.poison_queue.send_message(text, time_to_live=NEVER_EXPIRES)
        inserted = sent.inserted_on.isoformat() if sent.inserted_on else utcnow().isoformat()
        entry = poison_index.Entry(name, str(sent.id), str(sent.pop_receipt), inserted, batch_id, text)
        await poison_index.add(self.state, entry)

    async def _put_back(self, item: Received, msg: ChunkMessage) -> None:
        """The batch is still being submitted: hide the message briefly without counting an attempt."""
        header = envelope.skipped_header(msg.header)
        delay_s = min(MAX_WAIT_DELAY_S, 2**header.skips)
        text = (
            envelope.encode_reference(header, msg.blob)
            if msg.blob is not None
            else envelope.encode_inline(header, envelope.encode_items(msg.items or []))
        )
        if text is None:  # cannot happen: the same items fitted a moment ago
            text = str(item.message.content)
        if await self._update(item, text, delay_s):
            await self._wake_at(item.visible_at_ms)
        self.report.waiting += 1

    async def _delete(self, item: Received) -> None:
        try:
            async with item.lock, translated(f"delete message {item.message.id}"):
                await self.queue.delete_message(item.message, pop_receipt=item.pop_receipt)
        except ResourceMissing:
            # Its visibility ran out and someone else holds it now; they will settle it (idempotently).
            log.warning("message %s on %s was taken over before it could be deleted", item.message.id, self.queue_name)

    async def _update(self, item: Received, text: str, visibility_s: int) -> bool:
        """Rewrite the message and hide it for `visibility_s`; False if someone else holds it now."""
        try:
            async with item.lock, translated(f"update message {item.message.id}"):
                await self.queue.update_message(
                    item.message, pop_receipt=item.pop_receipt, content=text, visibility_timeout=visibility_s
                )
        except ResourceMissing:
            log.warning("message %s on %s was taken over before it could be updated", item.message.id, self.queue_name)
            return False
        item.visible_at_ms = self._epoch_ms() + visibility_s * 1000
        self._note_visible(item.visible_at_ms)
        return True

    # -- events: continue, scale-out, retry-due, watchdog ------------------------------------------------------

    def _event(self, reason: Reason, slot: int = 0) -> TriggerEvent:
        return TriggerEvent(self.settings.account_name, self.queue_name, reason, slot=slot)

    async def _publish(self, reason: Reason, *, slot: int = 0, at: datetime | None = None) -> int | None:
        try:
            number = await self.s.publisher.publish(self._event(reason, slot), at=at)
        except TriggerUnavailable as e:
            log.warning("could not publish %s for %s (the fallback will cover): %s", reason.value, self.queue_name, e)
            return None
        self.report.events.append(reason.value if not slot else f"{reason.value}:{slot}")
        return number

    async def _maybe_scale_out(self) -> None:
        if self.slot != 0 or self.settings.max_drainers_per_queue == 1:
            return
        if self.clock() - self._last_scale_check < SCALE_CHECK_S:
            return
        self._last_scale_check = self.clock()
        try:
            depth = await self._depth()
        except StorageError as e:  # a probe is best effort: the receive loop goes on, the next probe may work
            log.warning("scale-out probe of %s failed; trying again later: %s", self.queue_name, e)
            return
        wanted = drainers_for_depth(
            depth, per_drainer=self.settings.scale_out_depth, maximum=self.settings.max_drainers_per_queue
        )
        for slot in range(self._recruited, wanted):
            await self._publish(Reason.SCALE_OUT, slot=slot)
        self._recruited = max(self._recruited, wanted)

    async def _still_deserved(self) -> bool:
        """Whether this slot should go on at today's depth (slot 0 always does; a failed probe says yes)."""
        if self.slot == 0:
            return True
        try:
            depth = await self._depth()
        except StorageError as e:
            log.warning("depth of %s unknown; slot %d goes on: %s", self.queue_name, self.slot, e)
            return True
        return deserves_slot(
            self.slot, depth, per_drainer=self.settings.scale_out_depth, maximum=self.settings.max_drainers_per_queue
        )

    async def _depth(self) -> int:
        async with translated(f"depth of {self.queue_name}"):
            return (await self.queue.get_queue_properties()).approximate_message_count or 0

    def _note_visible(self, at_ms: int) -> None:
        self._latest_visible_ms = max(self._latest_visible_ms, at_ms)

    def _watchdog_delay_s(self) -> int:
        """Past the lease's expiry and past the latest visibility this drainer set (with one more visibility
        period of room, so the extensions that follow do not each move it)."""
        visible_in_s = math.ceil(max(0, self._latest_visible_ms - self._epoch_ms()) / 1000)
        room = self.settings.visibility_timeout_s
        return max(self.settings.lease_s, room, visible_in_s + room) + WATCHDOG_MARGIN_S

    async def _schedule_watchdog(self) -> None:
        delay = self._watchdog_delay_s()
        number = await self._publish(Reason.WATCHDOG, slot=self.slot, at=utcnow() + timedelta(seconds=delay))
        if number is None:
            return  # the old watchdog (if any) stays: it is cancelled only once its successor exists
        previous = self._watchdog
        self._watchdog = (number, self.clock() + delay, self._epoch_ms() + delay * 1000)
        if previous is not None:
            await self._cancel(previous[0])

    async def _at_renewal(self, lease: DrainLease) -> None:
        await self._keep_watchdog_ahead()
        await self._watch_rate(lease)

    async def _watch_rate(self, lease: DrainLease) -> None:
        """Write this drainer's message rate on its lease while it matters; slot 0 then sums the queue's and
        says when it nears the queue's scalability target (the rate behind /api/queues' advice)."""
        rate = self._meter.sample()
        if rate < REPORT_FROM_PER_S and self._rate_written < REPORT_FROM_PER_S:
            return
        await lease.publish_rate(rate)
        self._rate_written = rate
        if self.slot != 0 or rate < REPORT_FROM_PER_S or self._rate_warned:
            return
        try:
            leases = await queue_leases(self.state, self.queue_name, fresh_s=self.settings.lease_s)
        except StorageError as e:
            log.debug("rates of %s not read: %s", self.queue_name, e)
            return
        said = advice(self.queue_name, leases.rate_per_s, len(self.settings.partition_queues()))
        if said is not None:
            log.warning("%s", said)
            self._rate_warned = True

    async def _keep_watchdog_ahead(self) -> None:
        """Called at each lease renewal: a long session keeps its watchdog ahead of a possible crash, and of
        every message it has hidden (a watchdog that fires before they reappear finds nothing and ends)."""
        if (
            self._watchdog is None
            or self._watchdog[1] - self.clock() < self.settings.lease_s
            or self._watchdog[2] < self._latest_visible_ms + WATCHDOG_MARGIN_S * 1000
        ):
            await self._schedule_watchdog()

    async def _cancel_watchdog(self) -> None:
        if self._watchdog is not None:
            await self._cancel(self._watchdog[0])
            self._watchdog = None

    async def _cancel(self, number: int) -> None:
        try:
            await self.s.publisher.cancel(number)
        except TriggerUnavailable as e:
            log.info("could not cancel scheduled watchdog %d (it will find nothing to do): %s", number, e)

    async def _wake_at(self, visible_ms: int) -> None:
        """A retry-due event after `visible_ms`, when a message this drainer leaves behind reappears, unless one
        already scheduled covers it (scheduled when the message is written, so a crash later loses nothing)."""
        at_ms = wakeup_for(visible_ms, self._wakeups, window_ms=RETRY_WINDOW_MS, margin_ms=WAKE_MARGIN_MS)
        if at_ms is None:
            return
        if await self._publish(Reason.RETRY_DUE, at=datetime.fromtimestamp(at_ms / 1000, timezone.utc)) is not None:
            self._wakeups.append(at_ms)

    @staticmethod
    def _epoch_ms() -> int:
        return int(time.time() * 1000)

    def _log_report(self) -> None:
        r = self.report
        log.info(
            "drain %s slot %d (%s): %s; %d message(s), %d chunk(s) done, %d item(s) ok, %d failed, %d retried, "
            "%d stale, %d waiting; %.2f s; %d storage transactions %s; events %s",
            r.queue, r.slot, r.reason, r.outcome, r.messages, r.chunks_done, r.items_ok, r.items_failed,
            r.items_retried, r.stale, r.waiting, r.seconds, r.transaction_total, r.transactions, r.events or "none",
        )  # fmt: skip


async def drain_event(services: Services, event: TriggerEvent) -> DrainReport:
    """Serve one trigger event: drain the queue it names, if it is one of this app's."""
    from shared.errors import MalformedEvent

    if event.queue not in services.settings.partition_queues():
        raise MalformedEvent(f"event names queue {event.queue!r}, which is not one of this app's work queues")
    if event.account != services.settings.account_name:
        raise MalformedEvent(f"event names account {event.account!r}, not {services.settings.account_name!r}")
    if event.slot >= services.settings.max_drainers_per_queue:
        raise MalformedEvent(f"event asks for slot {event.slot}, beyond MAX_DRAINERS_PER_QUEUE")
    try:
        return await Drainer(services, event.queue, slot=event.slot, reason=event.reason).run()
    except StorageError as e:
        # Storage is out: come back in a moment rather than burn the event's deliveries into dead-lettering.
        log.warning("drain of %s stopped by storage (%s); continuing in %d s", event.queue, e, STORAGE_RETRY_S)
        again = TriggerEvent(event.account, event.queue, Reason.CONTINUE, slot=event.slot)
        try:
            await services.publisher.publish(again, at=utcnow() + timedelta(seconds=STORAGE_RETRY_S))
        except TriggerUnavailable:
            raise e from None  # neither service answers: let Service Bus redeliver this event
        return DrainReport(event.queue, event.slot, event.reason.value, outcome="storage-failed")
