"""Progress (issue 37 item 2): a batch with visible work is handled within a bound, checked beside every run.

A batch is *visible* once its submit answered 202 and its `not_before`, if it has one, has passed: its chunks are
stored, committed and visible in its queues, and nothing else is waiting for it. Unless it was cancelled or its
items expired first, its first handler call starts within `bound_s` of the later of that moment and the end of the
last fault that may have delayed it (`quiet_from`). The bound is what the app promises with nothing at fault
(README, "wake-up ... sub-second on a running instance"; docs/design.md, the drain and the look chain): its
doorbell, rung at once or scheduled for its start, is delivered within the bus's delay; the instance that takes it
may first finish the drain execution it is in (at most `DRAIN_BUDGET_S` + the session margin, which the world holds
every session to); a sync handler's thread may start late; and the calls of the batches visible before it may come
first (each chunk at most `MAX_DEQUEUE_COUNT` calls of the slowest handler time). Nothing in it waits for the look
chain or the timer: those are the nets for lost doorbells, which is what the faults' tails allow for.

*Faults.* A fault that began before the batch's 202 delays it at most by what it leaves behind once over: a crashed
drainer's lease (`LEASE_S`), then a floor interval of the look chain its submit armed, a visibility timeout of
chunks a dying drainer held, or the lock of a trigger message it held (`sim.bus.LOCK_S`); a Service Bus outage or
refused sends (the doorbell deferred, rung within `MAX_RETRY_S` of its end) the same. A fault that began after the
202 may have taken the batch's own doorbell, its look chain or the process that deferred it: its end plus the
timer's period and the back-off ceiling (the nets, as documented). A trigger message Service Bus lost (seen up to a
watch period late), and a handler call that hung until `functionTimeout`, are faults from the moment they happen
(as `sim.checks.promises` counts them). A lost `look` leaves its queue's chain armed and dead: a submit re-arms it
only once the look is `GRACE_MS` overdue, so until then the timer is the net whenever the loss came (random seed
170 on 9f9f88e: the chain's look lost at 8.6 s, a drainer's continuation and the crashed holder's watchdog lost
at 35.7 s, the submit at 38.8 s met two taken leases, and the first call came with the timer).

Without the fix of issue 36 item 6, a scheduled batch's keyed retry (its first submit died between its commit and
its doorbell) or its deferred doorbell rang at once: the drainer found only hidden chunks, the look chain backed
off, and at its start no doorbell came. Its first call then waited for the chain's next look (minutes at the
shipped back-off) or the timer: past this bound.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.bus.deferrals import MAX_RETRY_S
from shared.core.errors import MalformedEvent
from shared.core.events import Reason, TriggerEvent
from sim.bus import LOCK_S
from sim.checks.promises import RESTART_S
from sim.clock import EPOCH_S
from sim.host import FUNCTION_TIMEOUT_S

# The world (`sim.world.World`) is passed in, not imported: it imports this module.
World = Any

SESSION_MARGIN_S = 60.0  # `sim.world.SESSION_MARGIN_S`: a session may run past its budget finishing its calls
LATENCY_SLACK_S = 10.0  # storage and bus latencies, the instances' clock skews (up to 3 s each way)
SDK_RETRIES_S = 16.0  # the storage clients' retries sit out about this long (`shared.store.storage.CLIENT_OPTIONS`)
IDLE_WATCH_S = 5.0  # the watch's period while no accepted batch waits for its first call


@dataclass(frozen=True)
class Fault:
    start_s: float
    end_s: float


class Answers(dict[str, list[int]]):
    """`World.answers` (batch id -> the statuses its submits answered), with when each answer came: the callers
    append to the list `setdefault` gives them, at the moment of the answer."""

    def __init__(self, answers: dict[str, list[int]], now: Any) -> None:
        super().__init__(answers)
        self.now = now
        self.at: dict[str, list[float]] = {}

    def setdefault(self, key: str, default: Any = None) -> list[int]:
        self.at.setdefault(key, []).append(self.now())
        return super().setdefault(key, [] if default is None else default)

    def first_202_s(self, batch_id: str) -> float | None:
        at = self.at.get(batch_id, [])
        return next((t for t, status in zip(at, self.get(batch_id, []), strict=False) if status == 202), None)


@dataclass
class Waiting:
    answered_s: float  # when its submit's first 202 was seen
    visible_s: float  # when its chunks became visible (the answer, or its not_before)
    expires_s: float | None
    flagged: bool = False


class Progress:
    """Watches every accepted batch until its first handler call (see the module docstring)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.waiting: dict[str, Waiting] = {}
        self.first_call: dict[str, float] = {}
        self.answered_s: dict[str, float] = {}  # batch id -> when its first 202 came
        world.answers = Answers(world.answers, world.now_s)
        self.calls_seen = 0
        self.lost: list[tuple[float, bool]] = []  # when Service Bus lost trigger messages, and if a look was one
        self.lost_count = 0
        # (batch id, its first call's delay past its quiet start, its bound) of each batch watched to its first call
        self.met: list[tuple[str, float, float]] = []

    def base_s(self) -> float:
        """The bound with nothing at fault and nothing ahead."""
        scenario, settings = self.world.scenario, self.world.settings
        thread = scenario.thread_start_s[1] if scenario.handler == "sync" else 0.0
        return float(settings.drain_budget_s + SESSION_MARGIN_S + scenario.bus_delay_s + LATENCY_SLACK_S + thread)

    def bound_s(self, batch_id: str) -> float:
        """`base_s`, and the handler time of the batches visible no later than this one (their chunks may go first:
        an older lane, a high priority, a fair share)."""
        world, scenario, settings = self.world, self.world.scenario, self.world.settings
        call_s = scenario.handler_s[1] + (scenario.thread_start_s[1] if scenario.handler == "sync" else 0.0)
        mine = self.waiting[batch_id].visible_s
        chunks = 0
        for other, waiting in self.waiting.items():
            sub = world.labels.get(other)
            if other != batch_id and sub is not None and waiting.visible_s <= mine:
                chunks += -(-sub.items // settings.chunk_max_items)
        for other, at in self.first_call.items():  # those already begun count too: their retries may go first
            sub = world.labels.get(other)
            if sub is not None and at <= mine + self.base_s():
                chunks += -(-sub.items // settings.chunk_max_items)
        return float(self.base_s() + chunks * settings.max_dequeue_count * call_s)

    def faults(self) -> list[tuple[Fault, str]]:
        """Every fault of the run so far with its kind: "crash", "storage", "bus" (away, or refusing sends),
        "renewals", "hang", "lost"."""
        world, scenario = self.world, self.world.scenario
        out = [(Fault(c.at_s, c.at_s + c.down_s), "crash") for c in scenario.crashes]
        out += [(Fault(s.start_s, s.end_s + SDK_RETRIES_S), "storage") for s in scenario.storage_spans]
        out += [(Fault(s.start_s, s.end_s + MAX_RETRY_S), "bus") for s in [*scenario.bus_spans, *scenario.sends]]
        out += [(Fault(s.start_s, s.end_s), "renewals") for s in scenario.renewals]
        out += [(Fault(at, at + FUNCTION_TIMEOUT_S + RESTART_S), "hang") for _, at in world.hangs]
        out += [(Fault(at, at), "lost-look" if look else "lost") for at, look in self.lost]
        return out

    def quiet_from(self, waiting: Waiting, now: float) -> float:
        """When the faults begun by `now` stopped delaying a batch answered at `waiting.answered_s`."""
        settings = self.world.settings
        before = max(settings.lease_s + settings.backoff_floor_ms / 1000, settings.visibility_timeout_s, LOCK_S)
        after = self.world.scenario.timer_s + settings.backoff_ceiling_ms / 1000
        ends = [waiting.visible_s]
        for fault, kind in self.faults():
            if fault.start_s <= now:
                # a trigger message lost is seen up to a period late: one lost just before the 202 may be its doorbell
                began_after = kind == "lost-look" or (
                    fault.start_s >= waiting.answered_s - (IDLE_WATCH_S if kind == "lost" else 0.0)
                )
                ends.append(fault.end_s + (after if began_after else before))
        return float(max(ends))

    async def watch(self) -> None:
        world = self.world
        while True:
            period = 1.0 if self.waiting or not self.first_call else IDLE_WATCH_S
            await asyncio.sleep(period)
            now = world.now_s()
            if world.broker.lost > self.lost_count:  # lost within the last period: taken as lost at its start
                dropped = world.broker.dropped[self.lost_count :]
                self.lost_count = world.broker.lost
                self.lost.append((now - period, any(_reason(body) == Reason.LOOK for body in dropped)))
            self.learn(now)
            self.check(now)

    def learn(self, now: float) -> None:
        world = self.world
        for call in world.calls[self.calls_seen :]:
            self.first_call.setdefault(call.batch_id, call.started_s)
            waiting = self.waiting.get(call.batch_id)
            if waiting is not None:
                delay = call.started_s - self.quiet_from(waiting, call.started_s)
                self.met.append((call.batch_id, delay, self.bound_s(call.batch_id)))
                del self.waiting[call.batch_id]
        self.calls_seen = len(world.calls)
        for batch_id, statuses in world.answers.items():
            if 202 not in statuses or batch_id in self.answered_s:
                continue
            answered = world.answers.first_202_s(batch_id)
            self.answered_s[batch_id] = now if answered is None else answered
            manifest = world.manifest(batch_id) or {}
            not_before = _virtual(manifest.get("not_before"))
            if not_before is not None and not_before > self.answered_s[batch_id]:
                self.reached(batch_id, self.answered_s[batch_id])
            if batch_id not in self.first_call:
                visible = max(self.answered_s[batch_id], not_before or 0.0)
                self.waiting[batch_id] = Waiting(
                    self.answered_s[batch_id], visible, _virtual(manifest.get("expires_at"))
                )

    def reached(self, batch_id: str, answered: float) -> None:
        """The doors of issue 36 item 6 a scheduled batch opened: its 202 came while Service Bus was away or refused
        sends (its doorbell deferred), or after the instance its submit went to died (a keyed retry's)."""
        world, scenario = self.world, self.world.scenario
        if any(s.start_s <= answered < s.end_s for s in [*scenario.bus_spans, *scenario.sends] if s.kind != "link"):
            world.features.add("doorbell-deferred")
        sub = world.labels.get(batch_id)
        if sub is not None and any(
            c.instance == sub.instance and sub.at_s <= c.at_s < answered for c in scenario.crashes
        ):
            world.features.add("schedule-retried")

    def check(self, now: float) -> None:
        world = self.world
        for batch_id, waiting in self.waiting.items():
            if waiting.flagged or now < waiting.visible_s:
                continue
            if batch_id in world.cancels.answered or (waiting.expires_s is not None and waiting.expires_s <= now):
                continue
            start = self.quiet_from(waiting, now)
            bound = self.bound_s(batch_id)
            if now - start <= bound:
                continue
            manifest = world.manifest(batch_id) or {}
            if manifest.get("ended") is not None or manifest.get("final_status") is not None:
                continue  # cancelled (or ended by its tolerance) before any call was needed
            waiting.flagged = True
            world.violate(
                f"batch {batch_id[:8]} visible since {waiting.visible_s:.0f} s has had no handler call "
                f"{now - start:.0f} s after it was visible with no fault (progress bound {bound:.0f} s)"
            )


def _virtual(stamp: Any) -> float | None:
    """An ISO time of a manifest on the loop's clock."""
    if not isinstance(stamp, str):
        return None
    return datetime.fromisoformat(stamp).timestamp() - EPOCH_S


def start(world: World) -> None:
    """Beside one run (`sim.platform.start`)."""
    world.progress = Progress(world)
    world.spawn(world.progress.watch(), "progress")


def _reason(body: bytes) -> Reason | None:
    try:
        return TriggerEvent.decode(body).reason
    except MalformedEvent:
        return None
