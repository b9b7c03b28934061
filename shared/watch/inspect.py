"""One look at a partition, the timer's or a scheduled look's: how deep its lanes are, and what to do about
work nobody is draining (publish a `fallback` event, or drain right here when Service Bus is away).

Shared by both watchers (`shared.watch.lookout`, `shared.watch.fallback`), so neither imports the other's look.
"""

from __future__ import annotations

import logging
import time

from shared.core.errors import TriggerUnavailable
from shared.core.events import Reason, TriggerEvent
from shared.engine import lane_queues
from shared.engine.drainer import Drainer
from shared.services import Services
from shared.store.leases import active_drainers
from shared.telemetry import metrics

log = logging.getLogger("shared.watch.fallback")  # its records read as the fallback's, as they always have


async def inspect(services: Services, queue: str, deadline: float, *, thorough: bool = False) -> tuple[str, int]:
    """One look at a partition, the timer's or a `look` event's: (action, depth). Empty: ("idle", 0).

    A look trusts the partition's quiet record (a lane recorded quiet costs no read). The timer's look once a
    day is `thorough`, the last net: it reads every lane's depth, and a lane the record holds quiet that it finds
    holding messages (a replay or submit whose second mark failed) is marked again, so drainers look at it.
    Its cost: one depth read per lane a day (2,000 lanes are 2,000 reads a day; `shared.store.fallback_state`).
    A lane a look reads empty at its mark is recorded quiet (one write), so the next look reads it no more: a
    drainer's own record write is best effort, and lanes it left out cost a read at every look until then."""
    state = await services.storage.ensure_container(services.settings.state_container)
    if thorough:
        lanes = await lane_queues.depths(services, queue, state, trust_quiet=False, record=True)
        quiet = await lane_queues.read_quiet(state, queue) if any(lanes.values()) else {}
        for lane, n in lanes.items():
            if n and lane.name in quiet:
                log.warning("fallback: lane %s holds %d message(s) but was recorded quiet; marked again", lane.name, n)
                await lane_queues.mark(services, lane.name)
    else:
        lanes = await lane_queues.depths(services, queue, state, record=True)  # a lane recorded quiet costs no read
    depth = sum(lanes.values())
    metrics.observe_depth(queue, depth)
    if depth == 0:
        return "idle", 0
    return await act_on_work(services, queue, depth, deadline, [lane.name for lane, n in lanes.items() if n]), depth


async def depth_of(services: Services, queue: str) -> int:
    """Every lane's messages together, invisible ones included."""
    state = await services.storage.ensure_container(services.settings.state_container)
    return sum((await lane_queues.depths(services, queue, state)).values())


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
