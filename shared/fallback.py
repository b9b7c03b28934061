"""The fallback poller: a low-frequency safety net that finds work no trigger announced.

The timer is the last net: it ticks rarely (every 6 hours by default; between ticks `shared.lookout`'s chain of
scheduled looks watches every queue that holds messages), and a queue is looked at only when its back-off
says it is due: one listing of its lanes (`shared.lanes`) and one depth read per lane.
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

from shared import lane_queues, lookout, metrics
from shared.backoff import PollState
from shared.drain import Drainer
from shared.errors import StorageError, TriggerUnavailable
from shared.events import Reason, TriggerEvent
from shared.fallback_state import to_view
from shared.leases import active_drainers
from shared.runtime import Services

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PollOutcome:
    queue: str
    action: str  # not-due | idle | busy | waiting | triggered | drained
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
    return [await poll_queue(services, q, deadline, clock_ms) for q in services.settings.partition_queues()]


async def poll_queue(services: Services, queue: str, deadline: float, clock_ms: Callable[[], int]) -> PollOutcome:
    store = services.backoff
    now_ms = clock_ms()
    state = await store.load(queue, now_ms)
    if not state.is_due(now_ms):
        return PollOutcome(queue, "not-due", None, state)
    action, depth = await inspect(services, queue, deadline)
    if depth == 0:
        state = store.policy.after_idle(state, now_ms=now_ms, u=random.random())
        await store.save(queue, state)
        metrics.observe_backoff(queue, state.interval_ms / 1000)
        log.info("fallback: %s is empty; next look in %.0f s", queue, (state.next_due_ms - now_ms) / 1000)
        return PollOutcome(queue, "idle", 0, state)
    await keep_looking(services, queue)
    state = store.policy.after_work(state, now_ms=clock_ms(), u=random.random())
    await store.save(queue, state)
    metrics.observe_backoff(queue, state.interval_ms / 1000)
    return PollOutcome(queue, action, depth, state)


async def inspect(services: Services, queue: str, deadline: float) -> tuple[str, int]:
    """One look at a partition, the timer's or a `look` event's: (action, depth). Empty: ("idle", 0)."""
    lanes = await lane_queues.depths(services, queue)
    depth = sum(lanes.values())
    metrics.observe_depth(queue, depth)
    if depth == 0:
        return "idle", 0
    return await act_on_work(services, queue, depth, deadline, [lane.name for lane, n in lanes.items() if n]), depth


async def depth_of(services: Services, queue: str) -> int:
    """Every lane's messages together, invisible ones included."""
    return sum((await lane_queues.depths(services, queue)).values())


async def keep_looking(services: Services, queue: str) -> None:
    """Work the timer found had no look chain armed, or its chain was lost: arm it (best effort; the next tick
    comes back anyway)."""
    try:
        if await lookout.arm(services, queue):
            log.warning("fallback: %s held work with no look armed; look chain armed again", queue)
    except (TriggerUnavailable, StorageError) as e:
        log.warning("fallback: could not arm the look chain of %s: %s", queue, e)


async def act_on_work(services: Services, queue: str, depth: int, deadline: float, lanes: list[str]) -> str:
    """`lanes`: those of the queue's lanes that hold messages."""
    container = await services.storage.ensure_container(services.settings.state_container)
    if await active_drainers(container, queue):
        return "busy"
    if not await lane_queues.any_visible(services, lanes):
        # Messages exist but are invisible: in a retry delay (a retry-due event is scheduled) or in flight.
        return "waiting"
    event = TriggerEvent(services.settings.account_name, queue, Reason.FALLBACK, payload_size=0)
    try:
        await services.publisher.publish(event)
        log.warning("fallback: %s holds about %d message(s) no trigger announced; trigger published", queue, depth)
        return "triggered"
    except TriggerUnavailable as e:
        log.warning("fallback: Service Bus unreachable (%s); draining %s here", e, queue)
    budget = max(1.0, deadline - time.monotonic())
    await Drainer(services, queue, reason=Reason.FALLBACK, budget_s=budget).run()
    return "drained"
