"""Trigger events a submit could not publish (Service Bus unreachable), published again from this process.

A deferred batch is stored and accepted; only its doorbell is missing. Rather than wait for the fallback's
next look (up to the back-off ceiling, half an hour by default), the process that accepted it tries the
event again with a growing delay while Service Bus stays away, and gives up after `GIVE_UP_S` (the
fallback, told by the same deferral to look at the queue at its next tick, covers a process that dies). It
costs nothing while nothing is deferred.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from shared.errors import TriggerUnavailable
from shared.events import TriggerEvent
from shared.publisher import Publisher

log = logging.getLogger(__name__)

FIRST_RETRY_S = 2.0
MAX_RETRY_S = 30.0
GIVE_UP_S = 1800.0


class DeferredTriggers:
    def __init__(self, publisher: Callable[[], Publisher], *, first_s: float = FIRST_RETRY_S) -> None:
        self._publisher = publisher  # looked up at each try: the services' publisher may be replaced
        self._first_s = first_s
        self._pending: dict[str, TriggerEvent] = {}  # one event per queue is enough to wake it
        self._task: asyncio.Task[None] | None = None

    def add(self, event: TriggerEvent) -> None:
        self._pending.setdefault(event.queue, event)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._retry(), name="deferred triggers")

    def pending(self) -> list[str]:
        return sorted(self._pending)

    async def _retry(self) -> None:
        delay, started = self._first_s, time.monotonic()
        while self._pending and time.monotonic() - started < GIVE_UP_S:
            await asyncio.sleep(delay)
            for queue, event in list(self._pending.items()):
                try:
                    await self._publisher().publish(event)
                except TriggerUnavailable as e:
                    log.info("deferred trigger for %s still waits for Service Bus: %s", queue, e)
                    break
                del self._pending[queue]
                log.warning("deferred trigger for %s published once Service Bus answered", queue)
            delay = min(MAX_RETRY_S, delay * 2)
        if self._pending:
            log.warning("gave up re-publishing deferred triggers for %s; the fallback covers", self.pending())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
