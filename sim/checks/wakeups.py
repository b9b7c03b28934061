"""*No lost wake-up* (docs/design.md, "Invariants": every message left behind has an event): a drain session that
stops with work left (its budget spent, its lease lost, or an express page's lane holding more: `Drainer.
_left_with_work`) leaves a wake-up for its partition due at once.

When such a drain run ends while its partition holds visible chunk messages and no session of a live instance
drains it, a wake-up naming that partition (`continue`, `retry-due`, `watchdog`, a doorbell, a `fallback`, a
scale-out or a replay) is on Service Bus, due within the bus's latency: a later one (a retry-due for messages still
hidden) leaves the visible ones waiting. A `look` does not count: the look chain is the net for wake-ups Service
Bus lost or refused, not for ones never sent; so a wake-up Service Bus lost counts, and a run during which Service
Bus refused sends (away, a refused send, a dropped link) is excused. A session out of budget that publishes no
`continue` breaks it (`no-continuation-at-budget`), though the look chain then brings a drainer within its floor.

The check runs as the drain stops (the router's call of the engine's `serve` returns: `stops_watched`), not as its
function returns: the router then finalises the batches the drain touched, and meanwhile the drain's `continue`
may be taken and served (finding the partition empty, rightly) while a submit stores a chunk and has yet to ring
its doorbell. Judged then, that chunk looked left behind with no wake-up (`flood` seed 99), though the drain had
left nothing and the chunk's wake-up is its submit's doorbell (the look promises hold the submit to that).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from shared import router
from shared.core.events import Reason, TriggerEvent
from shared.engine.report import DrainReport
from shared.services import Services
from sim.host import INSTANCE

WAKEUPS = frozenset(Reason) - {Reason.LOOK, Reason.NOTIFY, Reason.PROBE, Reason.REPLAY_STEP}
LEFT_WITH_WORK = ("budget", "lease-lost", "work-left")  # a drain run's outcomes when it stopped with work left
LATENCY_S = 1.0  # a wake-up published as the run ends is deliverable within this (plus the scenario's bus delay)
LEFT = "left behind with no wake-up"
SERVE = "serve"  # patched by name: mypy holds module attributes as fixed

# The world (`sim.world.World`) is passed in, not imported: it imports this module.
World = Any


@contextmanager
def stops_watched(world: World) -> Iterator[None]:
    """For one run: `left_behind` judged as each drain stops, on the instance whose drain it was (`shared.router`
    calls the engine's `serve` by its module name, so the run's router calls this one)."""
    serve: Callable[..., Awaitable[DrainReport]] = getattr(router, SERVE)  # the engine's, or a mutant's patch

    async def watched(services: Services, event: TriggerEvent, trace: str | None = None) -> DrainReport:
        began = world.now_s()
        report = await serve(services, event, trace)
        instance = INSTANCE.get()
        if instance is not None:
            left_behind(world, instance, event, report, world.now_s() - began)
        return report

    setattr(router, SERVE, watched)
    try:
        yield
    finally:
        setattr(router, SERVE, serve)


def left_behind(world: World, instance: Any, event: TriggerEvent, report: Any, took_s: float) -> None:
    """Called as the drain stops (`stops_watched`), before its function's after-drain work and its settlement."""
    queue = event.queue
    if report.outcome not in LEFT_WITH_WORK or queue not in world.looks.partitions:
        return
    now = world.world_time()
    lanes = [q for name, q in world.account.queues.items()
             if not name.endswith("-poison") and world.looks.partition(name) == queue]  # fmt: skip
    visible = sum(1 for q in lanes for m in q.messages if m.visible_s <= now)
    if not visible or _refused(world, world.now_s() - took_s, world.now_s()):
        return
    if any(key[0] == queue for other in world.live() for key in other.services.draining):
        return
    due = now + LATENCY_S + world.scenario.bus_delay_s
    broker = world.broker
    pending = [d.body for d in broker.messages if d.holder is not instance and d.available_s <= due]
    if any(_wakes(body, queue) for body in [*pending, *broker.dropped]):
        return
    world.violate(
        f"{visible} visible chunk message(s) of {queue} {LEFT}: the {event.reason.value} run on {instance.name} "
        f"stopped ({report.outcome}) after {took_s:.1f} s, and no session drains the partition"
    )


def _wakes(body: bytes, queue: str) -> bool:
    event = TriggerEvent.decode(body)
    return event.queue == queue and event.reason in WAKEUPS


def _refused(world: World, began_s: float, now_s: float) -> bool:
    """Service Bus was away or refused sends at some point of the run (virtual seconds)."""
    scenario = world.scenario
    return any(s.start_s <= now_s and began_s <= s.end_s for s in [*scenario.bus_spans, *scenario.sends])
