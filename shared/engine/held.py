"""A chunk message's life while a drainer holds it: kept invisible while it waits and works, admitted (or
discarded: an abandoned, cancelled, expired or not-yet batch), worked by the handler holding a place, settled
after the place is released, and put back without an attempt when the handler's downstream is overloaded.

A mixin of `shared.engine.drainer.Drainer`, which owns the session these methods run in; the attributes below
are the drainer's.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable

from shared.batch import envelope
from shared.batch.batches import Admission
from shared.batch.envelope import ChunkMessage
from shared.batch.settlement import past_last_attempt, unanswered
from shared.core.errors import MalformedEnvelope, NotRun, Overloaded, ResourceMissing, SessionEnding, StorageError
from shared.core.settings import Settings
from shared.engine.chunks import ChunkWork, Worked
from shared.engine.fair_slots import FairSlots
from shared.engine.lane_watch import LaneWatch
from shared.engine.overload import OverloadPause
from shared.engine.report import DrainReport
from shared.engine.settling import MAX_SKIPS, Settler
from shared.engine.visibility import keeping_invisible
from shared.engine.wakeups import Wakeups
from shared.store.received import Received, epoch_ms
from shared.telemetry import metrics

log = logging.getLogger("shared.engine.drainer")  # one logger for the whole engine

MAX_HIDDEN_S = 7 * 24 * 3600 - 1  # a storage queue hides a message for less than 7 days


class HeldMessages:
    settings: Settings
    queue_name: str
    clock: Callable[[], float]
    report: DrainReport
    wakeups: Wakeups
    lanes: LaneWatch
    chunks: ChunkWork
    settler: Settler
    pause: OverloadPause
    _slots: FairSlots
    _held: int  # messages received and not yet handled

    async def _handle(self, item: Received, placed: Callable[[], None] | None = None) -> None:
        """Process one message, keeping it invisible while it waits and works; never raise. `placed()` is called
        once its chunk has a place (`FairSlots`), before its handler is."""
        try:
            await keeping_invisible(
                item,
                self._process(item, placed),
                visibility_s=self.settings.visibility_timeout_s,
                clock=self.clock,
                extended=self.wakeups.note_visible,
            )
        except asyncio.CancelledError:
            raise
        except StorageError as e:
            # The message reappears after its visibility timeout and is tried again: a wake-up for then.
            log.warning("chunk message %s on %s left for redelivery: %s", item.message.id, self.queue_name, e)
            await self.wakeups.wake_at(item.visible_at_ms)
        except Exception:
            log.exception("chunk message %s on %s failed unexpectedly", item.message.id, self.queue_name)
        finally:
            self.lanes.handled += 1
            self._held -= 1

    async def _process(self, item: Received, placed: Callable[[], None] | None = None) -> None:
        """Decode, admit and run the handler holding a slot (CHUNK_CONCURRENCY); settle after releasing it,
        so storage round trips never keep another chunk from its handler. A chunk whose place comes once the
        session starts no more calls (its budget spent, its lease's renewal failed) is not admitted: it gives its
        place up and goes back for the next session, so the chunks still waiting do not take the place in turn,
        each for its own admission and settling (the simulation's lifecycle seed 734: a page of a cancelled
        batch's chunks, one place, each discard's delete retried by the SDK for 16 s in a storage outage, four
        of them after the budget: a session of 78 s for a budget of 10 s)."""
        worked: Worked | None = None
        async with self._slots.place(item.queue.queue_name):
            self.lanes.started += 1
            if placed is not None:
                placed()
            ending = self.chunks.ending()
            if not ending:
                worked = await self._admit_and_work(item)
        if ending:
            await self._hand_back(item)
        elif worked is not None:
            await self.settler.settle(item, *worked)
            msg, settlement = worked[0], worked[3]
            self.report.batches.add(msg.header.batch_id)
            await self.chunks.tolerance(msg.header, settlement.record)

    async def _hand_back(self, item: Received) -> None:
        """A chunk the session will not work: visible again at once for the next session, no attempt counted (a
        message that is no chunk is parked, as its admission would)."""
        try:
            msg = envelope.decode(str(item.message.content))
        except MalformedEnvelope as e:
            await self.settler.poison_raw(item, str(e))
            return
        await self.settler.put_back(item, msg, delay_s=0)

    async def _admit_and_work(self, item: Received) -> Worked | None:
        try:
            msg = envelope.decode(str(item.message.content))
            verdict = await self.chunks.admission(msg.header)
        except MalformedEnvelope as e:
            await self.settler.poison_raw(item, str(e))
            return None
        if verdict is Admission.STALE:
            self.report.stale += 1
            await self.settler.delete(item)
            return None
        if verdict is Admission.WAIT:
            await self.settler.put_back(item, msg)
            return None
        if verdict is Admission.ABANDONED:
            log.warning(
                "discarding chunk %d of batch %s: its submission never completed (STAGING_TTL_S)",
                msg.header.chunk,
                msg.header.batch_id,
            )
            await self.settler.delete(item)
            return None
        if verdict is Admission.EARLY:  # its batch's not_before has not come (a clock apart): hidden till then
            assert msg.header.not_before_ms is not None
            wait_s = math.ceil((msg.header.not_before_ms - epoch_ms()) / 1000)
            await self.settler.put_back(item, msg, delay_s=min(MAX_HIDDEN_S, max(1, wait_s)))
            return None
        if verdict in (Admission.CANCELLED, Admission.EXPIRED):
            await self._discard(item, msg, verdict)
            return None
        left = await self.chunks.recorded(item, msg)
        attempt = max(1, item.dequeued - msg.header.skips)
        if left is not None:  # a delivery recorded it, then lost its update or delete: finish that settlement
            await self.settler.finish(item, msg, left, attempt)
            return None
        if past_last_attempt(attempt, self.settings.max_dequeue_count):  # and no record: none returned, none made
            return await self._unanswered(item, msg, attempt)
        lane = item.queue.queue_name
        if self.pause.active(lane, self.clock()):  # received before the back-off began: do not call downstream
            await self._overloaded(item, msg, None, started=self.clock())
            return None
        started = self.clock()
        try:
            worked = await self.chunks.work(item, msg)
        except (MalformedEnvelope, ResourceMissing) as e:
            await self.settler.poison_raw(item, f"chunk {msg.header.chunk} of batch {msg.header.batch_id}: {e}")
            return None
        except NotRun as e:
            await self._discard(item, msg, Admission(e.verdict))
            return None
        except Overloaded as e:
            await self._overloaded(item, msg, e, started=started)
            return None
        except SessionEnding:  # visible again at once, for the next session (the receivers end: `_ending`)
            await self.settler.put_back(item, msg, delay_s=0)
            return None
        self.pause.worked(lane)
        return worked

    async def _unanswered(self, item: Received, msg: ChunkMessage, attempt: int) -> Worked | None:
        """A chunk delivered past the delivery after its last attempt whose lineage no delivery recorded (a handler
        hanging until the
        function's timeout at every delivery would be delivered forever, its batch never final): its items parked
        failed, unrun (`shared.batch.settlement.unanswered`), settled like any chunk's last attempt."""
        header = msg.header
        try:
            items, positions = await self.chunks.load_items(msg)
        except (MalformedEnvelope, ResourceMissing) as e:
            await self.settler.poison_raw(item, f"chunk {header.chunk} of batch {header.batch_id}: {e}")
            return None
        log.warning(
            "chunk %d of batch %s: no outcome recorded after %d deliveries (MAX_DEQUEUE_COUNT %d): parked unrun",
            header.chunk, header.batch_id, attempt - 1, self.settings.max_dequeue_count,
        )  # fmt: skip
        metrics.item_outcomes(0, 0, len(positions), {"queue": self.queue_name})
        settlement = unanswered(batch_id=header.batch_id, chunk=header.chunk, gen=header.gen, positions=positions,
                                items=items, attempt=attempt, max_attempts=self.settings.max_dequeue_count)  # fmt: skip
        return msg, items, positions, settlement

    async def _discard(self, item: Received, msg: ChunkMessage, verdict: Admission) -> None:
        """A chunk of an ended or expired batch: its items recorded as such, its handler never called."""
        try:
            record = await self.chunks.discard(item, msg, verdict)
        except (MalformedEnvelope, ResourceMissing) as e:
            await self.settler.poison_raw(item, f"chunk {msg.header.chunk} of batch {msg.header.batch_id}: {e}")
            return
        if record is None:  # a delivery before it recorded every item (its delete was lost): nothing to add
            await self.settler.delete(item)
        else:
            await self.settler.discard(item, record)
        self.report.batches.add(msg.header.batch_id)

    async def _overloaded(
        self, item: Received, msg: ChunkMessage, signal: Overloaded | None, *, started: float
    ) -> None:
        """Put the chunk back without counting an attempt (parked whole after MAX_SKIPS); on a new overload
        signal, pause its lane (`shared.engine.overload`)."""
        lane = item.queue.queue_name
        if signal is not None:
            pause = self.pause.signal(lane, self.clock(), signal.retry_after_s, started)
            log.warning(
                "handler overloaded on chunk %d of batch %s (%s): pausing lane %s for %d s; no attempt counted",
                msg.header.chunk, msg.header.batch_id, signal, lane, pause,
            )  # fmt: skip
        self.report.overloaded += 1
        metrics.CHUNKS.add(1, {"queue": self.queue_name, "outcome": "overloaded"})
        if msg.header.skips >= MAX_SKIPS:
            await self.settler.park_whole(item, msg, f"put back {MAX_SKIPS} times for an overloaded handler")
            return
        remaining = self.pause.remaining_s(lane, self.clock())
        await self.settler.put_back(item, msg, delay_s=max(1, math.ceil(remaining)))
