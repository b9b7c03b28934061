"""A drainer's CHUNK_CONCURRENCY places, shared fairly by its lanes (`shared.core.lanes`).

A received page waits for places; with a plain semaphore a small tenant's chunk would queue behind every chunk
of another tenant's pages already received (up to RECEIVERS x 32). Here a place that comes free goes to the
lane whose turn it is: high lanes with chunks waiting first, then round robin by lane, so a chunk waits for at
most one chunk of each other lane that has chunks waiting, not for all of them. And a lane with no chunk in the
handler never waits: its first chunk takes a place beyond CHUNK_CONCURRENCY (at most one per lane), so a small
tenant's chunk does not wait for a busy tenant's chunk to finish either.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from shared.core.lanes import parse


class FairSlots:
    def __init__(self, places: int, partition: str) -> None:
        self.free = places
        self.partition = partition
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}
        self._last = ""
        self._serving: Counter[str] = Counter()  # chunks holding a place (or an extra one), by lane

    def locked(self) -> bool:
        return self.free == 0

    def _high(self, name: str) -> bool:
        lane = parse(self.partition, name)
        return lane is not None and lane.high

    @asynccontextmanager
    async def place(self, lane: str) -> AsyncIterator[None]:
        extra = self.free == 0 and self._serving[lane] == 0 and lane not in self._waiting
        if not extra:
            await self._acquire(lane)
        self._serving[lane] += 1
        try:
            yield
        finally:
            self._serving[lane] -= 1
            if not self._serving[lane]:
                del self._serving[lane]
            if not extra:
                self._release()

    async def _acquire(self, lane: str) -> None:
        if self.free > 0 and not self._waiting:
            self.free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(lane, deque()).append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # the place came just as it was cancelled: pass it on
            else:
                queue = self._waiting.get(lane)
                if queue is not None and waiter in queue:
                    queue.remove(waiter)
                    if not queue:
                        del self._waiting[lane]
            raise

    def _release(self) -> None:
        lane = self._next()
        if lane is None:
            self.free += 1
            return
        queue = self._waiting[lane]
        waiter = queue.popleft()
        if not queue:
            del self._waiting[lane]
        self._last = lane
        waiter.set_result(None)

    def _next(self) -> str | None:
        """High lanes with waiters before the others; within each, the first lane after the last served."""
        if not self._waiting:
            return None
        high = sorted(n for n in self._waiting if self._high(n))
        names = high or sorted(self._waiting)
        return next((n for n in names if n > self._last), names[0])
