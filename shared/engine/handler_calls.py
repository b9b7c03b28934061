"""A drain session's handler calls: an async call, which the session can end where it awaits the handler, and a
sync call's thread, which nothing can end, so its call keeps its place until the thread returns.

The task that awaits a sync call's thread can be cancelled while the thread runs: a failed visibility extension
cancels its chunk's work wherever it waits (`shared.engine.visibility`), and a session's end cancels its receivers.
The chunk is given up (its message left for redelivery, as for any cancel), but its call runs on: its place among
the drainer's CHUNK_CONCURRENCY (`fair_slots.hold_until`) and its place in the session's claim on
HANDLER_MAX_IN_FLIGHT (`HandlerLimits.hold_until`) stay taken until the thread returns, and the session waits for
such threads before it gives its claim and its lease back (`returned`). The lease goes on
renewing meanwhile, and the invocation stays open, so the function's timeout still bounds a thread that hangs.
Before, the cancel gave the place back at once: the drainer admitted another chunk into it, or its session ended,
released its claim and its lease and returned with the thread still running (the simulation's replay seeds 627
and 658: three calls under a limit of 2, two under a limit of 1).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from shared.core.errors import SessionEnding
from shared.engine import fair_slots, sync_calls
from shared.engine.limits import HandlerLimits
from shared.store.leases import DrainLease

log = logging.getLogger("shared.engine.drainer")  # one logger for the whole engine


class HandlerCalls:
    """The handler calls of one drain session (its `ChunkWork`)."""

    def __init__(self) -> None:
        self._calls: set[asyncio.Task[Any]] = set()  # tasks awaiting an async handler call (`end_calls` ends them)
        self._ending_calls: set[asyncio.Task[Any]] = set()  # those `end_calls` cancelled
        self.sync_calls = 0  # sync calls whose thread runs: awaited, or left running by a cancelled chunk
        self._left: set[asyncio.Future[Any]] = set()  # the threads of sync calls whose chunk was given up

    @property
    def left_running(self) -> int:
        """Sync calls whose chunk was given up while their thread runs on."""
        return len(self._left)

    async def endable(self, call: Awaitable[Any]) -> Any:
        """An async handler's call, awaited in the chunk's own task (no task more: the loop's order stays as it
        was), which `end_calls` can cancel while it awaits the call: then SessionEnding (none of its items has an
        outcome; the chunk is handled again). A cancel from elsewhere (the function's end) stays a cancel."""
        task = asyncio.current_task()
        assert task is not None
        self._calls.add(task)
        try:
            return await call
        except asyncio.CancelledError:
            if self._ended_here(task):
                raise SessionEnding("the handler call was ended: the session's lease may lapse") from None
            raise
        finally:
            self._calls.discard(task)
            self._ended_here(task)  # a call that returned all the same: its result stands, the cancel taken back

    def _ended_here(self, task: asyncio.Task[Any]) -> bool:
        """Whether `end_calls` cancelled `task` and nothing else did (its cancel is then taken back)."""
        if task not in self._ending_calls:
            return False
        self._ending_calls.discard(task)
        return task.uncancel() == 0

    def end_calls(self) -> int:
        """Cancel the async handler calls running, each where it awaits the handler; answers how many. A sync
        handler's thread cannot be ended: its call runs on, holding its place in this session's claim, until it
        returns (or the function's timeout ends the process)."""
        for task in self._calls - self._ending_calls:
            self._ending_calls.add(task)
            task.cancel()
        return len(self._calls)

    async def on_thread(self, fn: Callable[[], Any], ready: Callable[[], bool], limits: HandlerLimits | None) -> Any:
        """A sync call on a thread of its own (`sync_calls.start`: NOT_READY if `ready()` failed as it began).
        Cancelled while the thread runs, the call is left running: its chunk's place among CHUNK_CONCURRENCY and
        the place `limits.admit` gave it stay taken until the thread returns, and `returned` waits for it."""
        self.sync_calls += 1
        thread = sync_calls.start(fn, ready)
        thread.add_done_callback(self._returned)
        try:
            return await asyncio.shield(thread)
        except asyncio.CancelledError:
            if not thread.done():
                self._left.add(thread)
                fair_slots.hold_until(thread)  # its CHUNK_CONCURRENCY place
                if limits is not None:
                    limits.hold_until(thread)
            raise

    def _returned(self, thread: asyncio.Future[Any]) -> None:
        self.sync_calls -= 1
        if thread in self._left:
            self._left.discard(thread)
            if not thread.cancelled():
                thread.exception()  # retrieved: nobody awaits a call whose chunk was given up

    async def returned(self, lease: DrainLease) -> bool:
        """Whether the session may give its claim and `lease` back: once every sync call left running has returned
        (at once if none was). The invocation stays open meanwhile, so `functionTimeout` bounds a thread that hangs;
        the wait is logged (it runs past the session's budget). A session cancelled (the function's end) does not
        wait: its lease is left to lapse with the claim under it (`DrainLease.abandon`) rather than go to the next
        holder while a thread still runs; answers False."""
        if not self._left:
            return True
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            lease.abandon()
            return False
        loop = asyncio.get_running_loop()
        began = loop.time()
        log.warning("drain lease %s: %d sync handler call(s) of chunks given up still run; the session keeps the lease "
                    "and its claim until they return", lease.blob_name, len(self._left))  # fmt: skip
        try:
            while self._left:
                await asyncio.wait(list(self._left))
        except asyncio.CancelledError:
            lease.abandon()
            raise
        log.info("drain lease %s: the sync handler calls left running returned after %.1f s", lease.blob_name,
                 loop.time() - began)  # fmt: skip
        return True
