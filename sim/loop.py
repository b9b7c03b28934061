"""A deterministic asyncio event loop: virtual time, no I/O, threads run inline.

The loop never sleeps: when nothing is ready it jumps its clock to the next timer. Every source of choice the
app's code sees (storage latencies, faults, the app's own `random` and `uuid4`) comes from one seeded
`random.Random`, so one seed is one exact schedule. The wall and monotonic clocks the app reads are patched to
this loop's virtual time while a simulation runs, shifted per simulated instance by its clock skew
(`sim.clock`).
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")


class Stalled(RuntimeError):
    """Raised when the simulation has nothing ready and no timer: every task waits for something that never
    comes (a deadlock in the simulated world)."""


class _NoIO(selectors.BaseSelector):
    """A selector that reports no I/O and moves the virtual clock instead of waiting."""

    def __init__(self, loop: SimLoop) -> None:
        self._loop = loop
        self._map: dict[int, selectors.SelectorKey] = {}

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._map[fd] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._map.pop(fd)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise Stalled("nothing is ready and no timer is set: the simulated world is deadlocked")
        if timeout > 0:
            self._loop.advance(timeout)
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._map

    def close(self) -> None:
        self._map.clear()


class SimLoop(asyncio.SelectorEventLoop):
    """An event loop whose `time()` is virtual and advances only when every task waits on a timer."""

    def __init__(self) -> None:
        self._now = 0.0
        super().__init__(_NoIO(self))
        self._clock_resolution = 1e-6
        # The world's thread pool (`sim.host.ThreadPool`): given a function the app hands to a thread, the future
        # of its run there, or None to run it inline (anything but the user's sync handler).
        self.offload: Callable[[Executor | None, Callable[..., Any]], asyncio.Future[Any] | None] = (
            lambda executor, func: None
        )

    def time(self) -> float:
        return self._now

    def _run_once(self) -> None:
        # asyncio takes a timer due within the clock's resolution as ready now. A real clock moves on meanwhile;
        # this one must be moved to it, or a wait shorter than the resolution (a session's last instant before
        # its deadline) would be ready at once forever and the loop would spin at one instant.
        ready: Any = getattr(self, "_ready", None)
        scheduled: list[asyncio.TimerHandle] = getattr(self, "_scheduled", [])
        if not ready and scheduled:
            due = scheduled[0].when()
            if self._now < due < self._now + self._clock_resolution:
                self._now = due
        super()._run_once()  # type: ignore[misc]

    def advance(self, seconds: float) -> None:
        # Land exactly on the next timer: summing float gaps could stop a hair short of it.
        target = self._now + seconds
        scheduled: list[asyncio.TimerHandle] = getattr(self, "_scheduled", [])
        if scheduled:
            due = scheduled[0].when()
            if abs(due - target) < 1e-7:
                target = due
        self._now = target

    def run_in_executor(  # type: ignore[override]
        self, executor: Executor | None, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        """Run `func` inline (threads would make the schedule depend on the machine) and return its outcome, or
        hand it to the world's thread pool (`offload`)."""
        pooled = self.offload(executor, partial(func, *args) if args else func)
        if pooled is not None:
            return pooled
        future: asyncio.Future[T] = self.create_future()
        try:
            future.set_result(func(*args))
        except BaseException as e:  # delivered to the awaiting task, as the executor would
            future.set_exception(e)
        return future
