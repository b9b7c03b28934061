"""The drain engine's settling: what happens to a message once its chunk was worked, or could not be.

Poison first, then the result record, then the message (deleted, or rewritten to carry only its failed items
and hidden for the retry back-off): a crash in between repeats work, never loses it. A message that cannot be
worked at all is parked whole. Every message hidden or rewritten here gets its wake-up as it is written.
"""

from __future__ import annotations

import json
import logging
import math
import random
from dataclasses import replace
from typing import Any

from azure.storage.blob.aio import ContainerClient
from azure.storage.queue.aio import QueueClient

from shared.batch import envelope, poison
from shared.batch.envelope import ChunkHeader, ChunkMessage
from shared.batch.settlement import Failure, ResultRecord, Settlement
from shared.core import layout
from shared.core.backoff import retry_delay_ms
from shared.core.errors import PopReceiptMismatch, ResourceMissing
from shared.core.settings import INLINE_MAX_BYTES, QUEUE_MESSAGE_MAX_BYTES, Settings
from shared.engine.report import DrainReport
from shared.engine.wakeups import Wakeups
from shared.store import poison_index
from shared.store.received import Received, epoch_ms, utcnow
from shared.store.result_store import ResultWriter
from shared.store.storage import NEVER_EXPIRES, request_id, translated, write_bytes
from shared.telemetry.activity import ACTIVITY

log = logging.getLogger("shared.engine.drainer")  # one logger for the whole engine

MAX_WAIT_DELAY_S = 60
# A chunk put back this many times without an attempt counted (its batch still submitting, its handler's
# downstream overloaded) is parked whole at its next overload instead of put back again: no chunk skips forever.
MAX_SKIPS = 20


def wait_delay_s(skips: int) -> int:
    """How long a chunk whose batch is still being submitted is hidden, at its `skips`-th put-back (1 on the
    first): 1 s, then twice as long each time, at most MAX_WAIT_DELAY_S."""
    return min(MAX_WAIT_DELAY_S, 1 << min(max(skips, 1) - 1, 6))


class Settler:
    def __init__(
        self,
        settings: Settings,
        queue_name: str,
        poison_queue: QueueClient,
        *,
        batches: ContainerClient,
        state: ContainerClient,
        results: ResultWriter,
        report: DrainReport,
        wakeups: Wakeups,
    ) -> None:
        self.settings, self.poison_queue = settings, poison_queue
        self.queue_name = queue_name  # the partition; a message's own lane is `item.queue`
        self.batches, self.state, self.results = batches, state, results
        self.report, self.wakeups = report, wakeups
        self._random = random.Random()

    async def settle(
        self, item: Received, msg: ChunkMessage, items: list[Any], positions: list[int], s: Settlement
    ) -> None:
        """Poison first, then the result record, then the message: a crash in between repeats, never loses."""
        header = msg.header
        record = s.record
        # Only failed items travel on: the common all-ok chunk never needs its items by position.
        by_position = dict(zip(positions, items, strict=True)) if s.poison or s.retry else {}
        if s.poison:
            await self._send_poison(item, msg, by_position, s.poison, record.attempt)
        await self.results.write(record)
        self.report.batches.add(header.batch_id)
        self.report.items_ok += len(record.ok)
        self.report.items_failed += len(record.failed)
        ACTIVITY.settled(len(record.ok), len(record.failed))
        if s.retry:
            delay_ms = await self._retry(item, msg, s.retry, by_position, record.attempt)
            log.info(
                "chunk %d of batch %s: %d ok, %d poisoned, %d retried in %d ms (attempt %d)",
                header.chunk, header.batch_id, len(record.ok), len(record.failed), len(s.retry), delay_ms,
                record.attempt,
            )  # fmt: skip
        else:
            await self.delete(item)
            self.report.chunks_done += 1

    async def finish(self, item: Received, msg: ChunkMessage, left: list[int], attempt: int) -> None:
        """A delivery of a chunk whose lineage an earlier delivery recorded, its update or delete lost: that
        settlement finished, no handler called (an outcome once recorded never changes): the items its record left
        retrying carried on as its retry would have, or the message deleted when it left none."""
        if not left:
            await self.delete(item)
            self.report.chunks_done += 1
            return
        by_position = dict(zip(msg.positions(len(msg.items)), msg.items, strict=True)) if msg.items is not None else {}
        delay_ms = await self._retry(item, msg, left, by_position, attempt)
        log.info(
            "chunk %d of batch %s: its recorded delivery's retry of %d item(s) carried on in %d ms (attempt %d)",
            msg.header.chunk, msg.header.batch_id, len(left), delay_ms, attempt,
        )  # fmt: skip

    async def _retry(
        self, item: Received, msg: ChunkMessage, positions: list[int], by_position: dict[int, Any], attempt: int
    ) -> int:
        """Rewrite the message to carry only `positions` (the next generation), hidden for the retry back-off of
        `attempt`; answers the back-off in ms."""
        delay_ms = retry_delay_ms(
            attempt,
            base_ms=self.settings.retry_base_delay_ms,
            max_ms=self.settings.retry_max_delay_ms,
            jitter=self.settings.retry_jitter,
            u=self._random.random(),
        )
        header = replace(envelope.retry_header(msg.header, positions), delivered=item.dequeued)
        text = await self._carry_on(msg, header, by_position)
        # Visibility is whole seconds: the wake-up must not come before the message is visible again.
        visible_s = math.ceil(delay_ms / 1000)
        if await self.update(item, text, visible_s):
            await self.wakeups.wake_at(item.visible_at_ms)
        self.report.items_retried += len(positions)
        return delay_ms

    async def discard(self, item: Received, record: ResultRecord) -> None:
        """The record of a chunk discarded unrun (its batch ended or expired), then the message deleted."""
        await self.results.write(record)
        self.report.discarded += len(record.cancelled) + len(record.expired)
        log.info(
            "chunk %d of batch %s: %d item(s) discarded unrun (cancelled %d, expired %d)",
            record.chunk, record.batch_id, len(record.cancelled) + len(record.expired), len(record.cancelled),
            len(record.expired),
        )  # fmt: skip
        await self.delete(item)
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
        self, item: Received, msg: ChunkMessage, by_position: dict[int, Any], failures: list[Failure], attempt: int
    ) -> None:
        # A replayed chunk starts its attempts again: the skips its receives did not count stay behind.
        header = replace(envelope.retry_header(msg.header, [f.position for f in failures]), skips=0, delivered=0)
        chunk_text = await self._carry_on(msg, header, by_position)
        first = failures[0].reason
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        # The lane it came from: a replay puts it back there.
        info = poison.PoisonInfo(item.queue.queue_name, first + more, len(failures), attempt, utcnow().isoformat())
        await self._park(poison.encode(info, chunk_text), header.batch_id)
        log.warning(
            "poisoned %d item(s) of chunk %d of batch %s to %s: %s",
            len(failures), header.chunk, header.batch_id, self.poison_queue.queue_name, first + more,
        )  # fmt: skip

    async def poison_raw(self, item: Received, reason: str) -> None:
        """A message that cannot be worked at all goes to the poison queue whole, never dropped."""
        lane = item.queue.queue_name
        info = poison.PoisonInfo(lane, reason, 0, int(item.message.dequeue_count or 1), utcnow().isoformat())
        text = poison.encode_raw(info, str(item.message.content))
        if len(text) > QUEUE_MESSAGE_MAX_BYTES:
            blob = f"poison-raw/{lane}/{item.message.id}.txt"
            await write_bytes(self.batches, blob, str(item.message.content).encode("utf-8"))
            text = poison.encode_raw(info, json.dumps({"blob": blob}))
        await self._park(text, None)
        log.warning("message %s of %s moved to the poison queue: %s", item.message.id, lane, reason)
        await self.delete(item)

    async def _park(self, text: str, batch_id: str | None) -> None:
        """Send to the poison queue, then index it (`shared.store.poison_index`), so that operators find it
        without receiving (hiding) anything."""
        name = self.poison_queue.queue_name
        async with translated(f"send to {name}"):
            sent = await self.poison_queue.send_message(text, time_to_live=NEVER_EXPIRES)
        inserted = sent.inserted_on.isoformat() if sent.inserted_on else utcnow().isoformat()
        entry = poison_index.Entry(name, str(sent.id), str(sent.pop_receipt), inserted, batch_id, text)
        await poison_index.add(self.state, entry)

    async def park_whole(self, item: Received, msg: ChunkMessage, reason: str) -> None:
        """Park a chunk that was never worked (every item), without the skips its message carried."""
        header = replace(msg.header, skips=0, delivered=0)
        text = self._text(item, msg, header)
        attempt = int(item.message.dequeue_count or 1)
        info = poison.PoisonInfo(item.queue.queue_name, reason, len(msg.items or header.positions or ()) or 1, attempt,
                                 utcnow().isoformat())  # fmt: skip
        await self._park(poison.encode(info, text), header.batch_id)
        log.warning("chunk %d of batch %s parked whole: %s", header.chunk, header.batch_id, reason)
        await self.delete(item)

    def _text(self, item: Received, msg: ChunkMessage, header: ChunkHeader) -> str:
        text = (
            envelope.encode_reference(header, msg.blob)
            if msg.blob is not None
            else envelope.encode_inline(header, envelope.encode_items(msg.items or []))
        )
        return text if text is not None else str(item.message.content)  # cannot happen: the items fitted

    async def put_back(self, item: Received, msg: ChunkMessage, delay_s: int | None = None) -> None:
        """Hide the message for a while without counting an attempt: its batch is still being submitted (1 s the
        first time, the least a queue hides a message for, since the submit is most likely committing; twice as
        long at each skip after), or the handler's downstream is overloaded (`delay_s`)."""
        header = envelope.skipped_header(msg.header) if msg.header.skips < MAX_SKIPS else msg.header
        header = replace(header, delivered=item.dequeued)
        if delay_s is None:
            delay_s = wait_delay_s(header.skips)
        text = self._text(item, msg, header)
        if await self.update(item, text, delay_s):
            await self.wakeups.wake_at(item.visible_at_ms)
        self.report.waiting += 1

    async def delete(self, item: Received) -> None:
        try:
            async with item.lock, translated(f"delete message {item.message.id}"):
                await item.queue.delete_message(
                    item.message, pop_receipt=item.pop_receipt, client_request_id=request_id()
                )
        except (ResourceMissing, PopReceiptMismatch):
            # Its visibility ran out and someone else holds it now (a stale pop receipt is a 400
            # PopReceiptMismatch), or it is gone; whoever holds it will settle it (idempotently).
            log.warning(
                "message %s on %s was taken over before it could be deleted", item.message.id, item.queue.queue_name
            )

    async def update(self, item: Received, text: str, visibility_s: int) -> bool:
        """Rewrite the message and hide it for `visibility_s`; False if someone else holds it now."""
        try:
            async with item.lock, translated(f"update message {item.message.id}"):
                await item.queue.update_message(
                    item.message,
                    pop_receipt=item.pop_receipt,
                    content=text,
                    visibility_timeout=visibility_s,
                    client_request_id=request_id(),
                )
        except (ResourceMissing, PopReceiptMismatch):
            # Someone else holds it now, or it is gone; or storage applied this very update and its answer was lost,
            # the SDK's retry then meeting the new pop receipt: hidden for `visibility_s` with nobody holding it. A
            # wake-up for when it would reappear covers that case (one scheduled event, coalesced with the others).
            log.warning(
                "message %s on %s was taken over before it could be updated", item.message.id, item.queue.queue_name
            )
            await self.wakeups.wake_at(epoch_ms() + visibility_s * 1000)
            return False
        item.visible_at_ms = epoch_ms() + visibility_s * 1000
        self.wakeups.note_visible(item.visible_at_ms)
        return True
