"""A drainer's CHUNK_CONCURRENCY places, shared fairly by its lanes (`shared.core.lanes`).

A received page waits for places; with a plain semaphore a small tenant's chunk would queue behind every chunk
of another tenant's pages already received (up to RECEIVERS x 32). Here a place that comes free goes to the
lane whose turn it is: high lanes with chunks waiting first, then round robin by lane, so a chunk waits for at
most one chunk of each other lane that has chunks waiting, not for all of them. And a lane with no chunk in the
handler never waits: its first chunk takes a place beyond CHUNK_CONCURRENCY (at most one per lane), so a small
tenant's chunk does not wait for a busy tenant's chunk to finish either. High chunks start first, but never
more than HIGH_BURST x RECEIVE_BATCH (128) in a row while a normal chunk waits, extra places included: the
bound `shared.core.lanes` states for pages holds for chunk starts too.

A place is held until the chunk's handler call is over, not only until the chunk's task is: a sync handler's
thread cannot be ended, so when its chunk is given up while the thread runs (a failed visibility extension
cancels the chunk's task), the place stays taken until the thread returns (`hold_until`). Before, the place went
back at once and the drainer started the next chunk's call beside the running thread: more sync threads than
CHUNK_CONCURRENCY (and the lane's extra place) allow.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import Counter, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from shared.core.lanes import HIGH_BURST, parse


class _Held:
    """The place the current chunk holds, and what it waits for before it goes back (a thread left running)."""

    def __init__(self) -> None:
        self.until: asyncio.Future[Any] | None = None


_HELD: contextvars.ContextVar[_Held | None] = contextvars.ContextVar("fair_slots_held", default=None)


def hold_until(call: asyncio.Future[Any]) -> None:
    """The current chunk's place (if it holds one) stays taken until `call` is done, whatever becomes of the
    chunk's task."""
    held = _HELD.get()
    if held is not None:
        held.until = call


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
        held = _Held()
        token = _HELD.set(held)
        try:
            yield
        finally:
            _HELD.reset(token)
            if held.until is not None and not held.until.done():
                held.until.add_done_callback(lambda _: self._vacate(lane, extra))
            else:
                self._vacate(lane, extra)

    def _vacate(self, lane: str, extra: bool) -> None:
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
