"""What a doorbell costs once its work was taken (issue 36 item 16), checked beside every run.

Each trigger event an instance's listener hands to the drain function is an *invocation*; the world counts the
storage requests served on its behalf (in its task, and the tasks it starts). The promise (docs/design.md, the
drain, "covered"): a `submitted` doorbell (not one rung for a not_before) delivered to an instance after a drain
execution of that process (the same incarnation: the memory it judges by is the process's) on the doorbell's
partition ended with its closing look, one that listed the partition's lanes after the doorbell's batch was
accepted (its 202) and then found nothing visible (no lease and no receive after that listing), ends at once
with **no storage call**: that look listed the mark its submit left on its lane after storing its chunks, so it
saw them taken. The mark must be there (a submit whose mark write failed is answered all the same) and still be
that submit's when listed: a lane's mark names only the last work put into it, so no later submit of its tenant, no
replay (which marks the lanes it refills) and no timer tick (whose daily look may mark a lane again) came between.

Without the fix (166fdf3 put back) only the clock rule covered a doorbell (work ready more than 5 s before the
look began): a flood's doorbells, queued behind the drain that took their work (the host hands the drain function
one event at a time) and delivered just after it, were each a drain execution of their own: a lease, two lane
listings, the quiet record (2,000 tenants' one-item submits cost 5,826 storage transactions in the first idle
minute). The `flood` family (`sim.doorbell_families`) makes such floods.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any

from shared.core.errors import MalformedEvent
from shared.core.events import Reason, TriggerEvent
from shared.core.lanes import committed_in
from shared.engine.lane_queues import MARK

# The world (`sim.world.World`) is passed in, not imported: it imports this module.
World = Any

LISTING = "ListQueues"  # a drainer's lane listing (`shared.engine.lane_queues`)
ENDED_LOOKING = "empty"  # a drain execution's outcome when its closing look found nothing (`DrainReport`)
# A closing look is a listing and a peek per lane that may hold work (then the router finalizes the batches it
# drained: reads, listings and writes of blobs); one that found work goes on to take the lease again and receive
# (an execution whose lease another instance took then ends "empty" too, its look having found work).
WENT_ON = frozenset({"LeaseBlob", "GetMessages"})


@dataclass
class Invocation:
    instance: str
    incarnation: int
    event: TriggerEvent | None
    began_s: float
    calls: int = 0  # storage requests served for it
    listed_s: float | None = None  # when its last lane listing was served
    since_listing: set[str] = field(default_factory=set)  # the kinds of storage operation served after it
    ended_s: float | None = None
    outcome: str = ""
    sessions: int = 0


CURRENT: contextvars.ContextVar[Invocation | None] = contextvars.ContextVar("sim_invocation", default=None)


class Doorbells:
    """The invocations of a run and the cost check (see the module docstring)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.ended: list[Invocation] = []
        self.judged = 0  # doorbells delivered after a closing look of their process had seen their work taken

    def install(self) -> None:
        """Observe this world's deliveries, storage requests and drain executions (its own objects only: nothing
        global is patched, so nothing outlives the run)."""
        world = self.world
        broker, weather, sessions = world.broker, world.storage_weather, world.sessions
        take, served, on_session = broker.take, weather.served, sessions.on_session

        async def taking(holder: Any) -> Any:
            delivery = await take(holder)
            # Set in the listener's own task (awaited, not spawned): the drain function runs in this context.
            CURRENT.set(Invocation(holder.name, holder.incarnation, _event(delivery.body), world.now_s()))
            return delivery

        def serving(operation: str) -> None:
            served(operation)
            invocation = CURRENT.get()
            if invocation is not None and invocation.ended_s is None:
                invocation.calls += 1
                if operation == LISTING:
                    invocation.listed_s = world.now_s()
                    invocation.since_listing = set()
                else:
                    invocation.since_listing.add(operation)

        def session_ended(instance: Any, event: TriggerEvent, report: Any, took_s: float) -> None:
            on_session(instance, event, report, took_s)
            invocation = CURRENT.get()
            if invocation is not None and invocation.ended_s is None:
                invocation.ended_s, invocation.outcome = world.now_s(), report.outcome
                invocation.sessions = report.sessions
                self.judge(invocation)
                self.ended.append(invocation)

        broker.take = taking
        weather.served = serving
        sessions.on_session = session_ended

    def judge(self, doorbell: Invocation) -> None:
        event = doorbell.event
        if event is None or event.reason is not Reason.SUBMITTED or event.scheduled or event.attempt is None:
            return
        look = self.covering(doorbell, event)
        if look is None:
            return
        self.judged += 1
        self.world.features.add("late-doorbell")
        if doorbell.calls:
            assert event.batch_id is not None
            self.world.violate(
                f"a doorbell of batch {event.batch_id[:8]} delivered to {doorbell.instance} at {doorbell.began_s:.1f} "
                f"s made {doorbell.calls} storage call(s), after the drain there that ended at {look.ended_s:.1f} s "
                f"had listed its lane ({look.listed_s:.1f} s) and found nothing visible"
            )

    def covering(self, doorbell: Invocation, event: TriggerEvent) -> Invocation | None:
        """The drain execution of the doorbell's process whose closing look saw its batch's work taken, if any."""
        world = self.world
        progress = getattr(world, "progress", None)
        answered = None if progress is None else progress.answered_s.get(event.batch_id)
        sub = world.labels.get(event.batch_id)
        if answered is None or sub is None or not self.marked(event):
            return None
        for look in reversed(self.ended):
            if (look.instance, look.incarnation) != (doorbell.instance, doorbell.incarnation):
                continue
            if look.event is None or look.event.queue != event.queue or look.ended_s is None:
                continue
            if look.outcome != ENDED_LOOKING or look.sessions < 1 or look.listed_s is None:
                continue
            if look.since_listing & WENT_ON:  # it went on (a lease, a receive): its look found work
                continue
            if look.listed_s <= answered or look.ended_s > doorbell.began_s:
                continue
            if self.marked_since(sub, answered, look.listed_s):
                continue
            return look
        return None

    def marked(self, event: TriggerEvent) -> bool:
        """Whether a lane of the doorbell's partition holds the mark its submit wrote after storing and committing
        (a submit whose mark write failed is answered all the same, its lane left with the mark written before)."""
        for name, queue in self.world.account.queues.items():
            if name.startswith(event.queue) and not name.endswith("-poison"):
                named = committed_in(queue.metadata.get(MARK))
                if named is not None and named[:2] == (event.batch_id, event.attempt):
                    return True
        return False

    def marked_since(self, sub: Any, answered: float, listed: float) -> bool:
        """Whether anything but the batch's own submit may have marked its lane between its 202 and the listing."""
        scenario = self.world.scenario
        later = [s for s in scenario.submits if s.tenant == sub.tenant and sub.at_s < s.at_s <= listed]
        replays = [at for at, _, _ in scenario.replays if at <= listed]
        ticks = int(listed // scenario.timer_s) > int(answered // scenario.timer_s)
        return bool(later or replays or ticks)


def _event(body: bytes) -> TriggerEvent | None:
    try:
        return TriggerEvent.decode(body)
    except MalformedEvent:
        return None


def start(world: World) -> None:
    """Beside one run (`sim.platform.start`)."""
    world.doorbells = Doorbells(world)
    world.doorbells.install()
