"""Invariants checked while a run goes on (see `sim.world`, RELIABILITY.md "The simulation"): the look chain's
bound, messages held per drainer, high chunk starts in a row, receives without a share of the handler limits,
virtual time that stops, exceptions nobody retrieved, and cancels. The world feeds them what it observes; those
it does not call are installed by `held_watched`, which the world enters for every run.

*Looks.* A partition (its queue and every lane of it) is looked at when a read of any of its queues is served:
GetMessages, PeekMessages or GetQueueMetadata (a drainer's page, a peek, a look's depth). While any of its
queues holds a message (visible or not), the time since it began holding messages or since its last look must
stay within `bound_s`: `BACKOFF_CEILING_MS` (the look chain's longest step, while messages wait out a retry;
the floor, `BACKOFF_FLOOR_MS`, after work arrives, is shorter) plus what may delay a look event on its way:
one drain session on the instance that takes it (`DRAIN_BUDGET_S` + the session margin), the trigger's
delivery delay and 10 s of latencies; plus, in runs whose faults may lose a chain (a trigger message lost,
Service Bus away, an instance crashed), one fallback timer period (the documented last net), and the length
of every storage fault span and crash (a look whose read fails is no look). And after a submit answered 202
(a first one, or a keyed retry answered with the batch it had accepted), each partition of its batch is looked
at within the same bound counted from the answer, with only the faults that end after it (`bound_after`): the
submit rang its doorbell and armed its look then, whatever became of the ones before.

*Held messages.* `Drainer._held` (messages received and not yet handled) never above 2 x RECEIVERS x
RECEIVE_BATCH (the engine's documented bound: the receivers' hold and the express pages' beside it). The check
reads the settings, not `Drainer.hold_max`, so a defect in `hold_max` itself is caught.

*High starts.* In a drainer's chunk places, at most HIGH_BURST x RECEIVE_BATCH high chunks start in a row while a
normal chunk waits for a place (`shared.engine.fair_slots`; see `high_starts_watched`).

*Time.* Virtual time keeps moving: SPIN_TURNS loop turns at one instant end the run as stalled (see
`time_watched`).

*Shares.* No drainer starts a receive while its claim on HANDLER_MAX_IN_FLIGHT holds no place (see
`shares_watched`).

*Errors.* Nothing reaches the event loop's exception handler (an exception never retrieved; see
`errors_watched`), and no API call ends in an unhandled error, a 500 (`sim.checks.promises.incidents_watched`).

*Cancels.* No handler call of a batch starts later than `ENDED_CHECK_S` after its cancel was answered (its ended
marker is kept `KEEP_S`, 7 days: see `Cancels.on_handler_start`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from shared.batch.lifecycle import ENDED_CHECK_S
from shared.bus.deferrals import MAX_RETRY_S  # a deferred doorbell rings at most this long after Service Bus is back
from shared.core import lanes
from shared.core.lanes import HIGH_BURST
from shared.engine import drainer
from shared.engine.drainer import Drainer
from shared.engine.fair_slots import FairSlots
from shared.ops import lifecycle
from shared.store import ended
from sim.checks.cost_promises import look_cost
from sim.checks.costs import looks_charged
from sim.checks.promises import Promises, incidents_watched
from sim.checks.wakeups import stops_watched
from sim.loop import Stalled

# The world (`sim.world.World`) is passed in, not imported: it imports this module.
World = Any

LATENCY_SLACK_S = 10.0
IDLE_WATCH_S = 5.0  # the look bound's watch, while nothing is held (less than LATENCY_SLACK_S)
# Names patched for one run (by name: mypy holds a module's attributes and a class's methods as fixed).
RUN_ONCE, RECEIVE_PAGE, STARTED = "_run_once", "receive_page", "_started"
SPIN_TURNS = 10_000  # loop turns at one virtual instant taken as a spin (measured: at most 18 in runs of every family)
CANCEL_SLACK_S = 0.0  # virtual time is exact: the bound is ENDED_CHECK_S itself


class Looks:
    """The look chain's bound (see the module docstring)."""

    def __init__(self, world: World, session_margin_s: float) -> None:
        self.world = world
        scenario, settings = world.scenario, world.settings
        self.partitions = settings.partition_queues()
        self.of: dict[str, str | None] = {}  # queue -> its partition (`partition`, kept: a pure function of the name)
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
        self.session_margin_s = session_margin_s
        self.answered: dict[str, int] = {}  # batch id -> 202s seen
        self.announced: list[tuple[str, float, float, set[str]]] = []  # (batch, answered at, bound, partitions)

    def bound_after(self, at_s: float) -> float:
        """The bound for a look after a 202 answered at `at_s`: as `bound_s`, counting only the faults that end
        after the answer (the submit rang its doorbell and armed its look then, whatever happened before)."""
        scenario, settings = self.world.scenario, self.world.settings
        bound = settings.backoff_ceiling_ms / 1000 + settings.drain_budget_s + self.session_margin_s
        bound += scenario.bus_delay_s + LATENCY_SLACK_S
        crashes = [c for c in scenario.crashes if c.at_s >= at_s]
        bus = [s for s in scenario.bus_spans if s.end_s > at_s]
        if scenario.bus_lose or crashes or scenario.handler_hang:
            bound += scenario.timer_s
        bound += sum(s.end_s - s.start_s + MAX_RETRY_S for s in bus)
        bound += sum(s.end_s - s.start_s for s in scenario.storage_spans if s.end_s > at_s)
        bound += sum(c.down_s for c in crashes)
        return float(bound)

    def check_announced(self, now: float, holding: set[str]) -> None:
        """After a submit answered 202 (a first one, or a keyed retry answered with the batch it accepted), each
        partition of its batch is looked at within `bound_after` the answer."""
        world = self.world
        for batch_id, statuses in world.answers.items():
            seen = statuses.count(202)
            if seen > self.answered.get(batch_id, 0):
                self.answered[batch_id] = seen
                manifest = world.manifest(batch_id) or {}
                queues = {q for q in manifest.get("queues", ()) if q in self.partitions}
                at = now - 1.0  # answered within the last second (this watch wakes every second)
                self.announced.append((batch_id, at, self.bound_after(at), queues))
        still = []
        for batch_id, at, bound, queues in self.announced:
            waiting = {p for p in queues if self.last.get(p, -1.0) < at}
            if waiting and now - at > bound:
                for p in sorted(waiting & holding):
                    world.violate(
                        f"queue {p} holds messages and was not looked at in the {now - at:.0f} s since batch "
                        f"{batch_id[:8]}'s submit answered 202 (bound {bound:.0f} s)"
                    )
            elif waiting:
                still.append((batch_id, at, bound, waiting))
        self.announced = still

    def partition(self, queue: str) -> str | None:
        if queue not in self.of:
            self.of[queue] = next((p for p in self.partitions if lanes.parse(p, queue) is not None), None)
        return self.of[queue]

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
        """Every second; every IDLE_WATCH_S while no partition holds messages and no 202 waits for its look (the
        idle family's hours), so a partition that begins holding is seen that much later at most."""
        holding: set[str] = set()
        while True:
            await asyncio.sleep(1.0 if holding or self.announced else IDLE_WATCH_S)
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
            self.check_announced(now, holding)


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
        with (
            high_starts_watched(world),
            shares_watched(world),
            time_watched(world),
            errors_watched(world),
            incidents_watched(world),
            world.lapses.watched(),  # the renewals storage did not answer (`sim.lapses`)
            looks_charged(world, look_cost),  # each look at the ended batches held to its cost (`sim.checks.costs`)
            stops_watched(world),  # no lost wake-up, judged as each drain stops (`sim.checks.wakeups`)
        ):
            world.promises = Promises(world)  # stamps and liveness (`sim.checks.promises`); the rest after the run
            world.spawn(world.promises.watch(), "promises")
            yield
    finally:
        if had is None:
            delattr(Drainer, "_held")
        else:
            setattr(Drainer, "_held", had)  # noqa: B010


@contextmanager
def time_watched(world: World) -> Iterator[None]:
    """For one run (entered by `held_watched`): virtual time keeps moving. A loop that turns SPIN_TURNS times at
    one instant spins (a wait below the clock's resolution, again and again): the run ends as stalled instead of
    never ending. A real clock would move on meanwhile, so this is a busy wait on a real machine."""
    loop = world.loop
    run_once = loop._run_once
    turns = [loop.time(), 0]

    def counted() -> None:
        now = loop.time()
        if now != turns[0]:
            turns[0], turns[1] = now, 0
        turns[1] += 1
        if turns[1] > SPIN_TURNS:
            turns[1] = 0  # the shutdown that follows gets as many turns to cancel what spins
            raise Stalled(f"virtual time stopped at {now:.6f} s: {SPIN_TURNS} loop turns at one instant")
        run_once()

    setattr(loop, RUN_ONCE, counted)  # this loop only: its class keeps its own
    try:
        yield
    finally:
        delattr(loop, RUN_ONCE)


@contextmanager
def shares_watched(world: World) -> Iterator[None]:
    """For one run (entered by `held_watched`): no drainer starts a receive while its claim on
    HANDLER_MAX_IN_FLIGHT holds no place (`shared.engine.limits`: a drainer without a share receives nothing;
    its chunks would wait hidden for a place another drainer holds)."""
    receive_page = getattr(drainer, RECEIVE_PAGE)
    flagged: list[str] = []

    async def watched(storage: Any, settings: Any, lane: str, limits: Any, *args: Any, **kwargs: Any) -> Any:
        if limits is not None and limits.capacity is not None and limits.capacity <= 0 and not flagged:
            flagged.append(lane)
            world.violate(f"a drainer with no share of HANDLER_MAX_IN_FLIGHT received from {lane}")
        return await receive_page(storage, settings, lane, limits, *args, **kwargs)

    setattr(drainer, RECEIVE_PAGE, watched)
    try:
        yield
    finally:
        setattr(drainer, RECEIVE_PAGE, receive_page)


@contextmanager
def errors_watched(world: World) -> Iterator[None]:
    """For one run (entered by `held_watched`): nothing reaches the event loop's exception handler, which is
    where an exception nobody retrieved ends ("Task exception was never retrieved", logged as an error on a
    real host) and a callback's exception goes."""
    loop = world.loop

    def handler(_: Any, context: dict[str, Any]) -> None:
        error = context.get("exception")
        detail = f": {type(error).__name__}: {str(error)[:120]}" if error is not None else ""
        world.violate(f"the event loop's exception handler was called: {context.get('message')}{detail}")

    loop.set_exception_handler(handler)
    try:
        yield
    finally:
        loop.set_exception_handler(None)


@contextmanager
def high_starts_watched(world: World) -> Iterator[None]:
    """For one run (entered by `held_watched`): in every drainer's chunk places (`FairSlots`), no more than
    HIGH_BURST x RECEIVE_BATCH high chunks start in a row while a normal chunk waits for a place. The count is
    the check's own (high starts since a normal one started or no normal chunk waited), and the bound comes
    from the settings, not from the places' `high_burst`."""
    bound = HIGH_BURST * world.settings.receive_batch
    flagged: list[int] = []
    started = FairSlots._started

    def counted(slots: FairSlots, lane: str) -> None:
        normal_waits = any(not slots._high(name) for name in slots._waiting)
        run = slots.__dict__.get("_sim_high_run", 0) + 1 if slots._high(lane) and normal_waits else 0
        slots.__dict__["_sim_high_run"] = run
        if run > bound and not flagged:
            flagged.append(run)
            world.violate(
                f"{run} high chunks started in a row on {slots.partition} while a normal chunk waited "
                f"(bound HIGH_BURST x RECEIVE_BATCH = {bound})"
            )
        started(slots, lane)

    setattr(FairSlots, STARTED, counted)
    try:
        yield
    finally:
        setattr(FairSlots, STARTED, started)


class Cancels:
    """No handler call of a cancelled batch starts later than `ENDED_CHECK_S` after the cancel's answer, and none
    of a batch with `expires_at` starts after it (by the clock of the instance least ahead: each judges by its own,
    skewed by up to 3 s). The world calls `on_handler_start` where the user's code really starts: for a sync
    handler, when its pool thread takes the call up, not when the chunk is handed to the pool."""

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
        world.answered_final.saw(batch_id, 200, status, "a cancel's answer")
        world.note(f"cancel {label} ({batch_id[:8]}) on {instance.name}: {status['status']}")

    def on_handler_start(self, batch_id: str) -> None:
        self.expiry(batch_id)
        at = self.answered.get(batch_id)
        now = self.world.now_s()
        # The marker is kept KEEP_S (7 days, longer than any run) after the cancel: the bound holds for the whole
        # run. (It was held only while the marker existed until dd28184, when `finalize` deleted the marker at the
        # batch's last record and a chunk recorded but not deleted came back to the handler: seed 59.)
        if at is not None and now > at + ENDED_CHECK_S + CANCEL_SLACK_S and now - at < ended.KEEP_S:
            self.world.violate(
                f"handler call of {batch_id[:8]} started {now - at:.1f} s after its cancel was answered "
                f"(ENDED_CHECK_S is {ENDED_CHECK_S:.0f} s)"
            )

    def expiry(self, batch_id: str) -> None:
        world = self.world
        expires = (world.manifest(batch_id) or {}).get("expires_at")
        if expires is None:
            return
        ahead = min(world.scenario.skews_s, default=0.0)
        late = world.world_time() + ahead - datetime.fromisoformat(expires).timestamp()
        if late > CANCEL_SLACK_S:
            world.violate(f"handler call of {batch_id[:8]} started {late:.1f} s after its expires_at")
