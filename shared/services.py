"""The ports one event loop's code works through: settings, storage, Service Bus, the handler, and the
process-wide state a drainer or a submit shares with the others of its process.

Built once per event loop by the composition root (`shared.runtime`); everything else receives it. It knows
no feature: the one thing it does on a feature's behalf (arming a queue's look chain when a deferred doorbell
finally rings) is a function the root plugs in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

from shared.batch.lifecycle import ENDED_CHECK_S
from shared.batch.verdicts import CommittedAttempts, DrainedBatches, EndedBatches
from shared.bus.deferrals import DeferredTriggers
from shared.bus.publisher import Publisher
from shared.core.lanes import Lane
from shared.core.settings import Settings
from shared.handlers import ChunkHandler
from shared.store.fallback_state import BackoffStore
from shared.store.storage import Storage
from shared.telemetry.metering import TransactionCounter


@dataclass
class Services:
    settings: Settings
    storage: Storage
    publisher: Publisher
    handler: ChunkHandler
    counter: TransactionCounter
    backoff: BackoffStore
    # arms a queue's look chain; given by the composition root (`shared.runtime`), so nothing here imports a watcher
    watch: Callable[[Services, str, datetime | None], Awaitable[bool]]
    # (queue, slot) pairs this process is draining right now: a duplicate trigger costs no transaction.
    draining: set[tuple[str, int]] = field(default_factory=set)
    # partition -> how the drainer at work on it here hears of a lane this process's submit just marked (the lane
    # and its mark), as its next listing would find it (shared.intake.lane_marks); set while its session holds a lease
    lane_news: dict[str, Callable[[Lane, str], None]] = field(default_factory=dict)
    # partition -> when (wall clock, ms) the last look of a drainer here that found it without visible work began:
    # a doorbell whose work was ready well before that is covered (shared.engine.serve); one key per partition
    looked: dict[str, int] = field(default_factory=dict)
    # the batches whose lane's mark such a look listed before it found nothing visible: their doorbells are covered
    # whatever the clocks say (shared.engine.serve); bounded in size
    drained: DrainedBatches = field(default_factory=DrainedBatches)
    # batch id -> committed attempt, for batches whose manifest was read as accepted; bounded in size and age.
    committed: CommittedAttempts = field(default_factory=CommittedAttempts)
    # batches ended early (cancelled, or failed past their tolerance), listed at most every ENDED_CHECK_S
    ended: EndedBatches = field(default_factory=lambda: EndedBatches(ENDED_CHECK_S))
    # trigger events a submit could not publish, tried again from this process
    deferred: DeferredTriggers = field(init=False)
    # large submits being decoded and stored now (MAX_LARGE_SUBMITS)
    large_submits: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        self.deferred = DeferredTriggers(lambda: self.publisher, self.arm_looks)
        self.large_submits = asyncio.Semaphore(self.settings.max_large_submits)

    async def arm_looks(self, queue: str, at: datetime | None = None) -> bool:
        """Arm `queue`'s look chain, its first look not before `at` (the watcher the composition root plugged in:
        `shared.watch.lookout.arm`)."""
        return await self.watch(self, queue, at)

    async def close(self) -> None:
        await self.deferred.close()
        await self.publisher.close()
        await self.storage.close()
