"""The fallback poller: a low-frequency safety net that finds work no trigger announced.

The timer is the last net: it ticks rarely (every 6 hours by default; between ticks `shared.watch.lookout`'s chain of
scheduled looks watches every queue that holds messages), and a queue is looked at only when its back-off
says it is due: one listing of its lanes (`shared.core.lanes`) and one depth read per lane.
Empty: the interval grows (capped). Work and no drainer: a `fallback` trigger is published, or, if
Service Bus is unreachable, the queue is drained right here within the tick's budget.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shared.core.backoff import PollState
from shared.core.errors import StorageError, TriggerUnavailable
from shared.services import Services
from shared.store.fallback_state import to_view
from shared.telemetry import metrics
from shared.watch import lookout
from shared.watch.inspect import inspect

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PollOutcome:
    queue: str
    action: str  # not-due | idle | busy | waiting | triggered | drained | storage-error
    depth: int | None
    state: PollState

    def as_dict(self, now_ms: int) -> dict[str, Any]:
        return {"queue": self.queue, "action": self.action, "depth": self.depth, "backoff": to_view(self.state, now_ms)}


def epoch_ms() -> int:
    return int(time.time() * 1000)


async def poll(
    services: Services, *, budget_s: float | None = None, clock_ms: Callable[[], int] = epoch_ms
) -> list[PollOutcome]:
    """One timer tick over every partition. `clock_ms` is the wall clock, or a simulated one (benchmarks)."""
    deadline = time.monotonic() + (budget_s if budget_s is not None else services.settings.drain_budget_s)
    return [await poll_one(services, q, deadline, clock_ms) for q in services.settings.partition_queues()]


async def poll_one(services: Services, queue: str, deadline: float, clock_ms: Callable[[], int]) -> PollOutcome:
    """`poll_queue`, with a storage failure of this partition logged and answered as `storage-error`: it does
    not end the tick for the partitions after it (each is looked at again at the next tick)."""
    try:
        return await poll_queue(services, queue, deadline, clock_ms)
    except StorageError as e:
        log.warning("fallback: could not look at %s (the next tick tries again): %s", queue, e)
        return PollOutcome(queue, "storage-error", None, services.backoff.policy.initial(clock_ms()))


async def poll_queue(services: Services, queue: str, deadline: float, clock_ms: Callable[[], int]) -> PollOutcome:
    store = services.backoff
    now_ms = clock_ms()
    state = await store.load(queue, now_ms)
    if not state.is_due(now_ms):
        return PollOutcome(queue, "not-due", None, state)
    thorough = store.thorough_due(queue, now_ms)
    action, depth = await inspect(services, queue, deadline, thorough=thorough)
    done = now_ms if thorough else None
    if depth == 0:
        state = store.policy.after_idle(state, now_ms=now_ms, u=random.random())
        await store.save(queue, state, thorough_ms=done)
        metrics.observe_backoff(queue, state.interval_ms / 1000)
        log.info("fallback: %s is empty; next look in %.0f s", queue, (state.next_due_ms - now_ms) / 1000)
        return PollOutcome(queue, "idle", 0, state)
    await keep_looking(services, queue)
    state = store.policy.after_work(state, now_ms=clock_ms(), u=random.random())
    await store.save(queue, state, thorough_ms=done)
    metrics.observe_backoff(queue, state.interval_ms / 1000)
    return PollOutcome(queue, action, depth, state)


async def keep_looking(services: Services, queue: str) -> None:
    """Work the timer found had no look chain armed, or its chain was lost: arm it (best effort; the next tick
    comes back anyway)."""
    try:
        if await lookout.arm(services, queue):
            log.warning("fallback: %s held work with no look armed; look chain armed again", queue)
    except (TriggerUnavailable, StorageError) as e:
        log.warning("fallback: could not arm the look chain of %s: %s", queue, e)
