"""(d) The whitepaper's queue listener ("Best practices for maximizing scalability and cost effectiveness of
queue-based messaging solutions on Windows Azure"): dequeue tasks that GetMessages 32 at a time and process
them concurrently, with the randomized back-off of its `QueueEmpty` handler and dequeue-task scaling.

- Empty GetMessages: `idle += 1`; the handler calls `QueryState()` (which reads the queue depth: one
  GetQueueMetadata), sleeps `min(floor + (2^idle - 1) * 100 ms * U(0.8, 1.2), 1 s)`, and a task whose delay
  reached the 1 s maximum ends itself while other dequeue tasks are active.
- First messages after idling (`QueueWorkDetected`): `QueryState()` again, and dequeue tasks are added up to
  10 / 50 / 100 for a depth of < 100 / < 1,000 / >= 1,000 (one task while idle).
"""

from __future__ import annotations

import asyncio
import logging

from bench.peers.base import Message, Peer

log = logging.getLogger(__name__)

BATCH_SIZE = 32
DELTA_S = 0.1
FLOOR_S = 0.1  # MinimumIdleInterval: a setting the paper leaves open; the queue trigger's minimum
MAXIMUM_S = 1.0  # MaximumIdleInterval: "will not exceed 1 second"
VISIBILITY_S = 30


def idle_delay(idle_count: int, *, u: float) -> float:
    """`min(floor + (2^idle - 1) * delta * U(0.8, 1.2), maximum)`, `u` in [0, 1) choosing within the spread."""
    if idle_count >= 60:
        return MAXIMUM_S
    return min(FLOOR_S + (2**idle_count - 1) * DELTA_S * (0.8 + 0.4 * u), MAXIMUM_S)


def dequeue_tasks_for_depth(depth: int) -> int:
    """`GetOptimalDequeueTaskCount`."""
    if depth < 100:
        return 10
    if depth < 1000:
        return 50
    return 100


class WhitepaperListener(Peer):
    async def run(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()
        self.start_tasks(1)
        while self.tasks and self.running():
            await asyncio.wait(set(self.tasks), return_when=asyncio.FIRST_COMPLETED)

    def start_tasks(self, count: int) -> None:
        for _ in range(count):
            task = asyncio.create_task(self.dequeue_task())
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def active(self) -> int:
        return sum(1 for t in self.tasks if not t.done())

    async def dequeue_task(self) -> None:
        idle = 0
        while self.running():
            batch = await self.queue.get(BATCH_SIZE, VISIBILITY_S)
            if batch:
                if idle > 0:
                    await self.work_detected()
                idle = 0
                await asyncio.gather(*(self.process(m) for m in batch))
                continue
            idle += 1
            await self.queue.depth()  # QueryState() reads CurrentQueueDepth on every empty poll
            delay = idle_delay(idle, u=self.random.random())
            if delay >= MAXIMUM_S and self.active() > 1:
                return
            await self.clock.sleep(delay)

    async def work_detected(self) -> None:
        wanted = dequeue_tasks_for_depth(await self.queue.depth())
        if self.active() < wanted:
            self.start_tasks(wanted - self.active())

    async def process(self, message: Message) -> None:
        if await self.handle(message):
            await self.queue.delete(message)
