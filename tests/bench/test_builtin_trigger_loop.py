"""Peer (a)'s loop on an in-memory queue (a fake: the loop's logic, not storage, is under test here):
when it fetches the next batch, and how failures end in the poison queue."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import Any

from bench.peers.base import Message
from bench.peers.builtin_trigger import BATCH_SIZE, MAX_DEQUEUE_COUNT, NEW_BATCH_THRESHOLD, BuiltinQueueTrigger
from bench.tools.clock import SimClock


class MemoryQueue:
    """Visible messages in order; a received message is invisible until released or deleted."""

    def __init__(self, count: int) -> None:
        self.visible = [Message(f"m{i}", "r", 0, i) for i in range(count)]
        self.counts: Counter[str] = Counter()
        self.poisoned: list[Any] = []
        self.in_flight_at_get: list[int] = []
        self.in_flight = 0
        self.drained = asyncio.Event()

    async def get(self, count: int, visibility_s: int) -> list[Message]:
        self.counts["GetMessages"] += 1
        self.in_flight_at_get.append(self.in_flight)
        batch, self.visible = self.visible[:count], self.visible[count:]
        for m in batch:
            m.dequeue_count += 1
        self.in_flight += len(batch)
        return batch

    async def delete(self, message: Message) -> None:
        self.counts["DeleteMessage"] += 1
        self.in_flight -= 1
        if not self.visible and not self.in_flight:
            self.drained.set()

    async def release(self, message: Message, visibility_s: int) -> None:
        self.counts["UpdateMessage"] += 1
        self.in_flight -= 1
        self.visible.append(message)

    async def depth(self) -> int:
        return len(self.visible)

    async def poison(self, message: Message) -> None:
        self.poisoned.append(message.item)
        await self.delete(message)


async def run_until_empty(peer: BuiltinQueueTrigger, queue: MemoryQueue) -> None:
    task = asyncio.create_task(peer.run())
    await asyncio.wait_for(queue.drained.wait(), 5)
    peer.until = peer.clock.now()  # stop after the current sleep
    await asyncio.wait_for(task, 5)


async def test_the_queue_trigger_fetches_16_and_the_next_batch_only_once_at_most_8_are_in_flight() -> None:
    queue = MemoryQueue(100)

    async def slow(items: Sequence[Any]) -> None:
        await asyncio.sleep(0.001 * (items[0] % 5))

    peer = BuiltinQueueTrigger(queue, slow, SimClock(), seed=1)
    await run_until_empty(peer, queue)
    assert queue.counts["DeleteMessage"] == 100
    fetching = queue.in_flight_at_get[1 : 100 // BATCH_SIZE + 1]
    assert fetching
    assert all(n <= NEW_BATCH_THRESHOLD for n in fetching)
    assert queue.counts["GetMessages"] >= 100 // BATCH_SIZE + 1


async def test_a_failing_item_is_retried_and_poisoned_after_five_dequeues() -> None:
    queue = MemoryQueue(3)
    attempts: Counter[int] = Counter()

    async def fails_on_one(items: Sequence[Any]) -> None:
        attempts[items[0]] += 1
        if items[0] == 1:
            raise RuntimeError("bad item")

    peer = BuiltinQueueTrigger(queue, fails_on_one, SimClock(), seed=2)
    await run_until_empty(peer, queue)
    assert queue.poisoned == [1]
    assert attempts == {0: 1, 1: MAX_DEQUEUE_COUNT, 2: 1}
    assert queue.counts["UpdateMessage"] == MAX_DEQUEUE_COUNT - 1
