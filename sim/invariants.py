"""Invariants checked while a run goes on (see `sim.world`, RELIABILITY.md "The simulation"): the look chain's
bound, messages held per drainer, and cancels. The world feeds them what it observes.

*Looks.* A partition (its queue and every lane of it) is looked at when a read of any of its queues is served:
GetMessages, PeekMessages or GetQueueMetadata (a drainer's page, a peek, a look's depth). While any of its
queues holds a message (visible or not), the time since it began holding messages or since its last look must
stay within `bound_s`: `BACKOFF_CEILING_MS` (the look chain's longest step, while messages wait out a retry;
the floor, `BACKOFF_FLOOR_MS`, after work arrives, is shorter) plus what may delay a look event on its way:
one drain session on the instance that takes it (`DRAIN_BUDGET_S` + the session margin), the trigger's
delivery delay and 10 s of latencies; plus, in runs whose faults may lose a chain (a trigger message lost,
Service Bus away, an instance crashed), one fallback timer period (the documented last net), and the length
of every storage fault span and crash (a look whose read fails is no look).

*Held messages.* `Drainer._held` (messages received and not yet handled) never above 2 x RECEIVERS x
RECEIVE_BATCH (the engine's documented bound; express pages fill only what the receivers leave). The check
reads the settings, not `Drainer.hold_max`, so a defect in `hold_max` itself is caught.

*Cancels.* No handler call of a batch starts later than `ENDED_CHECK_S` after its cancel was answered, while
its ended marker exists (see `Cancels.on_handler_start`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from shared.batch.lifecycle import ENDED_CHECK_S
from shared.core import lanes
from shared.engine.drainer import Drainer
from shared.ops import lifecycle
from shared.store import ended

# The world (`sim.world.World`) is passed in, not imported: it imports this module.
World = Any

LATENCY_SLACK_S = 10.0
CANCEL_SLACK_S = 0.0  # virtual time is exact: the bound is ENDED_CHECK_S itself


class Looks:
    """The look chain's bound (see the module docstring)."""

    def __init__(self, world: World, session_margin_s: float) -> None:
        self.world = world
        scenario, settings = world.scenario, world.settings
        self.partitions = settings.partition_queues()
        bound = settings.backoff_ceiling_ms / 1000 + settings.drain_budget_s + session_margin_s
        bound += scenario.bus_delay_s + LATENCY_SLACK_S
        if scenario.bus_lose or scenario.bus_spans or scenario.crashes or scenario.handler_hang:
            bound += scenario.timer_s
        bound += sum(s.end_s - s.start_s for s in scenario.storage_spans)
        bound += sum(c.down_s for c in scenario.crashes)
        self.bound_s = bound
        self.last: dict[str, float] = {}
        self.since: dict[str, float] = {}  # partition -> when it began holding messages
        self.flagged: set[str] = set()

    def partition(self, queue: str) -> str | None:
        return next((p for p in self.partitions if lanes.parse(p, queue) is not None), None)

    def on_read(self, queue: str) -> None:
        p = self.partition(queue)
        if p is not None:
            self.last[p] = self.world.now_s()

    def holding(self) -> set[str]:
        found = set()
        for name, q in self.world.account.queues.items():
            p = self.partition(name)
            if p is not None and q.messages:
                found.add(p)
        return found

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            now = self.world.now_s()
            holding = self.holding()
            for p in list(self.since):
                if p not in holding:
                    del self.since[p]
                    self.flagged.discard(p)
            for p in holding:
                since = self.since.setdefault(p, now)
                looked = max(since, self.last.get(p, since))
                if now - looked > self.bound_s and p not in self.flagged:
                    self.flagged.add(p)
                    self.world.violate(
                        f"queue {p} holds messages and was not looked at for {now - looked:.0f} s "
                        f"(bound {self.bound_s:.0f} s)"
                    )


class _HeldCount:
    """`Drainer._held` as a data descriptor: every change is reported to the running world's check."""

    check: Callable[[int], None] | None = None

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return obj.__dict__.get("_sim_held", 0)

    def __set__(self, obj: Any, value: int) -> None:
        obj.__dict__["_sim_held"] = value
        if self.check is not None:
            self.check(value)


@contextmanager
def held_watched(world: World) -> Iterator[None]:
    """For one run: every drainer's held count checked against 2 x RECEIVERS x RECEIVE_BATCH."""
    settings = world.settings
    bound = 2 * settings.receivers * settings.receive_batch
    flagged: list[int] = []

    def check(value: int) -> None:
        if value > bound and not flagged:
            flagged.append(value)
            world.violate(f"a drainer holds {value} messages (bound 2 x RECEIVERS x RECEIVE_BATCH = {bound})")

    descriptor = _HeldCount()
    descriptor.check = check
    had = Drainer.__dict__.get("_held")
    setattr(Drainer, "_held", descriptor)  # noqa: B010 (a class attribute the app declares only as annotation)
    try:
        yield
    finally:
        if had is None:
            delattr(Drainer, "_held")
        else:
            setattr(Drainer, "_held", had)  # noqa: B010


class Cancels:
    """No handler call of a cancelled batch starts later than `ENDED_CHECK_S` after the cancel's answer."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.answered: dict[str, float] = {}  # batch id -> when its cancel was answered

    async def issue(self, at_s: float, n: int) -> None:
        """A client's cancel of the scenario's `n`th submit at `at_s`, on a live instance, once its batch id is
        known (its submit answered); the answer's time starts the bound."""
        world = self.world
        await asyncio.sleep(at_s)
        label = world.scenario.submits[n].label
        batch_id = next((b for b, sub in world.labels.items() if sub.label == label), None)
        live = world.live()
        if batch_id is None or not live:
            world.note(f"cancel {label}: no batch id or no instance to ask")
            return
        instance = live[0]
        services = instance.services
        done: asyncio.Future[dict[str, Any]] = world.loop.create_future()

        async def call() -> None:
            try:
                done.set_result(await lifecycle.cancel(services, batch_id))
            except Exception as e:  # the client sees an error answer: no bound starts
                done.set_exception(e)

        instance.spawn(call(), f"POST /api/batches/{batch_id[:8]}/cancel")
        try:
            status = await asyncio.wait_for(asyncio.shield(done), 60.0)
        except Exception as e:
            world.note(f"cancel {label} ({batch_id[:8]}) on {instance.name}: no answer ({type(e).__name__})")
            return
        self.answered[batch_id] = world.now_s()
        world.note(f"cancel {label} ({batch_id[:8]}) on {instance.name}: {status['status']}")

    def on_handler_start(self, batch_id: str) -> None:
        at = self.answered.get(batch_id)
        now = self.world.now_s()
        world = self.world
        state = world.account.containers.get(world.settings.state_container, {})
        # Held while the batch's ended marker exists: `finalize` deletes it once every chunk has a record, and a
        # chunk recorded but not yet deleted (its drainer crashed) is then handled again (open: seed 59).
        if at is not None and now > at + ENDED_CHECK_S + CANCEL_SLACK_S and ended.marker(batch_id) in state:
            self.world.violate(
                f"handler call of {batch_id[:8]} started {now - at:.1f} s after its cancel was answered "
                f"(ENDED_CHECK_S is {ENDED_CHECK_S:.0f} s)"
            )
