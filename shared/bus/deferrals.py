"""Trigger events a submit could not publish (Service Bus unreachable), published again from this process.

A deferred batch is stored and accepted; only its doorbell is missing, and the look chain (`shared.watch.lookout`)
its submit would have armed. The process that accepted it tries both again with a growing delay while
Service Bus stays away, for as long as the process lives, up to `GIVE_UP_S`; a process that dies first leaves
the batch to the fallback timer's next tick, or to the next submit to that queue, which arms the chain. A chain
that storage would not let a submit (or a replay) arm, its doorbell sent, is tried again the same way while
storage fails. It costs nothing while nothing is deferred.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from shared.bus.publisher import Publisher
from shared.core.errors import StorageError, TriggerUnavailable
from shared.core.events import TriggerEvent

log = logging.getLogger(__name__)

FIRST_RETRY_S = 2.0
MAX_RETRY_S = 30.0
GIVE_UP_S = 6 * 3600.0  # the default fallback timer's period: past it, the timer has looked anyway


@dataclass
class Pending:
    event: TriggerEvent | None  # the doorbell still to ring, or None once it rang
    at: datetime | None = None  # when it rings and the chain's first look comes: a batch's not_before, or now
    armed: bool = False  # whether the queue's look chain is armed


class DeferredTriggers:
    def __init__(
        self,
        publisher: Callable[[], Publisher],
        arm: Callable[[str, datetime | None], Awaitable[object]],
        *,
        first_s: float = FIRST_RETRY_S,
    ) -> None:
        self._publisher = publisher  # looked up at each try: the services' publisher may be replaced
        self._arm = arm  # arms a queue's look chain; raises TriggerUnavailable while Service Bus is away
        self._first_s = first_s
        # one doorbell per queue and start time is enough to wake it: a doorbell rung now does not wake the
        # drainer a scheduled batch needs at its start, so each keeps its own
        self._pending: dict[tuple[str, datetime | None], Pending] = {}
        self._task: asyncio.Task[None] | None = None

    def add(self, event: TriggerEvent, *, rang: bool = False, at: datetime | None = None) -> None:
        """`event`'s doorbell (unless it `rang` already) and its queue's look chain, to be tried again; `at`: the
        moment both were due (a batch's not_before): they are scheduled for it, never rung before."""
        pending = self._pending.setdefault((event.queue, at), Pending(None if rang else event, at))
        if pending.event is None and not rang:
            pending.event = event
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._retry(), name="deferred triggers")

    def pending(self) -> list[str]:
        return sorted({queue for queue, _ in self._pending})

    async def _retry(self) -> None:
        delay, started = self._first_s, time.monotonic()
        while self._pending and time.monotonic() - started < GIVE_UP_S:
            await asyncio.sleep(delay)
            for key, pending in list(self._pending.items()):
                try:
                    await self._try(key[0], pending)
                except TriggerUnavailable as e:
                    log.info("deferred trigger for %s still waits for Service Bus: %s", key[0], e)
                    break
                except StorageError as e:
                    log.info("look chain of %s still waits for storage: %s", key[0], e)
                    continue
                del self._pending[key]
            delay = min(MAX_RETRY_S, delay * 2)
        if self._pending:
            log.warning("gave up re-publishing deferred triggers for %s; the fallback covers", self.pending())

    async def _try(self, queue: str, pending: Pending) -> None:
        if pending.event is not None:
            await self._publisher().publish(pending.event, at=pending.at)
            pending.event = None
            log.warning("deferred trigger for %s published once Service Bus answered", queue)
        if not pending.armed:
            # Raises StorageError while storage fails: tried again at the next round. The chain is the net for a
            # doorbell Service Bus took and then lost; left to the timer, its work waited up to 6 hours.
            await self._arm(queue, pending.at)
            pending.armed = True

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
