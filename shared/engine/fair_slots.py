"""A drainer's CHUNK_CONCURRENCY places, shared fairly by its lanes (`shared.core.lanes`).

A received page waits for places; with a plain semaphore a small tenant's chunk would queue behind every chunk
of another tenant's pages already received (up to RECEIVERS x 32). Here a place that comes free goes to the
lane whose turn it is: high lanes with chunks waiting first, then round robin by lane, so a chunk waits for at
most one chunk of each other lane that has chunks waiting, not for all of them. And a lane with no chunk in the
handler never waits: its first chunk takes a place beyond CHUNK_CONCURRENCY (at most one per lane), so a small
tenant's chunk does not wait for a busy tenant's chunk to finish either. High chunks start first, but never
more than HIGH_BURST x RECEIVE_BATCH (128) in a row while a normal chunk waits, extra places included: the
bound `shared.core.lanes` states for pages holds for chunk starts too.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from shared.core.lanes import HIGH_BURST, parse


class FairSlots:
    def __init__(self, places: int, partition: str, *, high_burst: int = HIGH_BURST * 32) -> None:
        self.free = places
        self.partition = partition
        self.high_burst = high_burst  # high chunk starts in a row at most while a normal chunk waits
        self._high_run = 0
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}
        self._last = ""
        self._serving: Counter[str] = Counter()  # chunks holding a place (or an extra one), by lane

    def locked(self) -> bool:
        return self.free == 0

    def _high(self, name: str) -> bool:
        lane = parse(self.partition, name)
        return lane is not None and lane.high

    def _normal_waits(self) -> bool:
        return any(not self._high(n) for n in self._waiting)

    def _started(self, lane: str) -> None:
        """Count a start against the burst: high starts in a row while a normal chunk waits."""
        if self._high(lane):
            self._high_run += 1
        else:
            self._high_run = 0

    @asynccontextmanager
    async def place(self, lane: str) -> AsyncIterator[None]:
        extra = self.free == 0 and self._serving[lane] == 0 and lane not in self._waiting
        if extra and self._high(lane) and self._high_run >= self.high_burst and self._normal_waits():
            extra = False  # the burst is spent: this high chunk waits its turn behind the normal ones
        if not extra:
            await self._acquire(lane)
        self._started(lane)
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
        while (lane := self._next()) is not None:
            queue = self._waiting[lane]
            waiter = queue.popleft()
            if not queue:
                del self._waiting[lane]
            if waiter.done():  # cancelled, its task not yet run to leave the line: the place goes to the next
                continue
            self._last = lane
            waiter.set_result(None)
            return
        self.free += 1

    def _next(self) -> str | None:
        """High lanes with waiters before the others, but no more than `high_burst` high starts in a row while a
        normal chunk waits; within each, the first lane after the last served."""
        if not self._waiting:
            return None
        high = sorted(n for n in self._waiting if self._high(n))
        normal = sorted(n for n in self._waiting if not self._high(n))
        names = high if high and not (normal and self._high_run >= self.high_burst) else normal or high
        return next((n for n in names if n > self._last), names[0])
