"""One simulated run: the world (storage, Service Bus, instances of the function host, a virtual clock), a
scenario and a fault plan drawn from one seed, the app's real code running in it, and the invariants checked
during and after the run.

An instance is what a Functions host process is: its own `Services` (its storage clients over the world's
transport, its publisher, its in-memory state), a Service Bus listener taking one trigger event at a time and
handing it to the app's router (`shared.router.route`, as `function_app.drain` does), HTTP calls answered by
the functions the API routes call, and, on one instance at a time, the fallback timer. A crash cancels every
task the instance started and drops its memory; its held messages return when their locks expire; it comes
back as a fresh process later. A function that outlives `functionTimeout` ends its instance's worker, as the
real host's restart does.

This module owns the run: the world's parts and its records (`World.__init__`), the doors the scenario opens
(`World.drive`), what the run waits for (`work_left`), and `run`. The rest is in rooms of their own, each
joined here in one line: the faults (`sim.faults`), what the world sees of the host's work (`sim.sessions`),
the doors (`sim.doors.callers`, `sim.platform`), the invariants during the run (`sim.checks.invariants.held_watched` and
what it enters) and after it (`sim.checks.final.final_checks`), and what a run returns (`sim.outcome`).
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import random
from collections.abc import Awaitable, Coroutine
from typing import Any

from shared.core import layout
from shared.core.layout import REPLAY_CLAIMS_PREFIX
from shared.core.settings import Settings
from shared.ops.notices import PREFIX as NOTICES
from sim import families, platform
from sim.bus import Broker, BusWeather
from sim.checks.answered_final import AnsweredFinal
from sim.checks.final import final_checks, json_of
from sim.checks.invariants import Cancels, Looks, held_watched
from sim.checks.promises import RESTART_S
from sim.clock import EPOCH_S, patched
from sim.doors import callers
from sim.doors.callers import routed
from sim.faults import Faults
from sim.host import FUNCTION_TIMEOUT_S, INSTANCE, Call, Instance, environment
from sim.lapses import Lapses
from sim.loop import SimLoop, Stalled
from sim.outcome import Outcome, Violation
from sim.receiver import Receiver, routed_notices
from sim.scenario import BASIC, Scenario, Submit
from sim.sessions import SESSION_MARGIN_S, Sessions
from sim.storage import transport as simstorage
from sim.storage.account import Account
from sim.straddle import fences_heard
from sim.stuck import STUCK_RUN_S

log = logging.getLogger(__name__)

SETTLE_S = 3600.0  # after the last fault, every accepted batch must complete within this


class World:
    def __init__(self, seed: int, scenario: Scenario) -> None:
        self.seed, self.scenario = seed, scenario
        self.rng = random.Random(seed)
        self.loop = SimLoop()
        self.loop.set_task_factory(self._task_factory)
        self.settings = Settings.from_env(environment(scenario))
        self.account = Account()
        self.faults = Faults(self)  # the scenario's fault plan, asked by the world's parts
        self.sessions = Sessions(self)  # what the world sees of the host's work, checked as it goes
        self.lapses = Lapses(self)  # drain leases as storage kept them (`sim.sessions`' handler limit)
        self.server = simstorage.StorageServer(
            self.account, self.world_time, self.rng, observe=self.sessions.on_storage
        )
        self.storage_weather = simstorage.StorageWeather(self.rng, fault=self.faults.storage, served=self.on_served)
        self.bus_weather = BusWeather(
            down=self.faults.bus_down, send_fault=self.faults.send, renewing=self.faults.renewing
        )
        self.broker: Broker
        self.instances = [Instance(self, f"i{n}", s) for n, s in enumerate(scenario.skews_s)]
        self.trace: list[str] = []
        self.violations: list[str] = []
        self.item_calls: dict[str, int] = {}
        self.in_flight = 0
        self.answers: dict[str, list[int]] = {}  # batch id -> HTTP statuses its submits answered
        self.refused: set[str] = set()
        self.held: dict[str, dict[str, tuple[str, str, int]]] = {}  # instance -> message id -> (batch, attempt, chunk)
        # The world's own tasks, in the order they were made (a dict, not a set: a set's order follows the tasks'
        # addresses, which depend on what the process ran before this seed)
        self.world_tasks: dict[asyncio.Task[Any], None] = {}
        self.labels: dict[str, Submit] = {}  # batch id -> the submit that made it
        self.accepted_items = 0
        self.hangs: list[tuple[str, float]] = []  # (instance, when) of each handler call that hangs
        self.fault_hang_s = 0.0  # when the last hang that is the world's fault began (`sim.stuck.a_fault`)
        self.looks = Looks(self, SESSION_MARGIN_S)
        self.cancels = Cancels(self)
        self.answered_final = AnsweredFinal(self)  # final statuses answered (`sim.checks.answered_final`)
        self.run_transactions = 0  # storage transactions of the run, before the final checks read anything
        # Records for the invariants (see the helpers' interface notes in sim.platform's docstring):
        self.calls: list[Call] = []  # every handler call, in the order they started
        self.receiver = Receiver(self)  # completion notices received: `receiver.received`
        self.features: set[str] = set()  # the doors this run opened (`sim.platform.FEATURES`)
        self.takeovers: list[tuple[float, float]] = []  # (began, ended) of each timer tick's replay takeover
        self.storage_log: list[tuple[float, str]] = []  # (virtual s, operation) of every storage request served
        self.loop.offload = self.sessions.offload

    # ---- plumbing -------------------------------------------------------------------------------------------
    def world_time(self) -> float:
        return EPOCH_S + self.loop.time()

    def _task_factory(self, loop: asyncio.AbstractEventLoop, coro: Any, context: Any = None) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, context=context)
        owner = context.get(INSTANCE) if context is not None else INSTANCE.get()
        owned = owner.tasks if owner is not None else self.world_tasks
        owned[task] = None
        task.add_done_callback(lambda done: owned.pop(done, None))
        return task

    def pending(self) -> list[asyncio.Task[Any]]:
        """The tasks not done yet, the world's then each instance's, each in the order they were made (a task made
        past the task factory, if any, last)."""
        tasks = [*self.world_tasks, *(t for instance in self.instances for t in instance.tasks)]
        known = set(tasks)
        tasks += [t for t in asyncio.all_tasks(self.loop) if t not in known]
        return [t for t in tasks if not t.done()]

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        context = contextvars.Context()
        return self.loop.create_task(coro, name=name, context=context)

    def note(self, text: str) -> None:
        self.trace.append(f"{self.loop.time():9.3f} {text}")

    def violate(self, text: str) -> None:
        self.note(f"VIOLATION {text}")
        self.violations.append(f"t={self.loop.time():.3f}: {text}")

    def now_s(self) -> float:
        return self.loop.time()

    def on_served(self, operation: str) -> None:
        self.storage_log.append((self.loop.time(), operation))

    def manifest(self, batch_id: str) -> dict[str, Any] | None:
        blob = self.account.containers.get(self.settings.batches_container, {}).get(layout.manifest_blob(batch_id))
        return None if blob is None else json_of(blob.data)

    # ---- the run --------------------------------------------------------------------------------------------
    def live(self) -> list[Instance]:
        return [i for i in self.instances if i.alive and i.services is not None]

    def work_left(self) -> int:
        """Chunk messages queued, replays' notes (a replay that died after its claim: the timer finishes it,
        `shared.ops.replay_takeover`), and completion notices not yet delivered or given up on (a batch with a
        callback whose notice is not stored yet counts: the timer's sweep stores a final batch's missing notice)."""
        queues = self.account.queues
        chunks = sum(
            len(q.messages) for name, q in queues.items() if name.startswith("work") and not name.endswith("-poison")
        )
        state = self.account.containers.get(self.settings.state_container, {})
        chunks += sum(1 for name in state if name.startswith(REPLAY_CLAIMS_PREFIX))
        if not any(s.callback for s in self.scenario.submits):
            return chunks
        batches = self.account.containers.get(self.settings.batches_container, {})
        waiting = 0
        for name, blob in batches.items():
            if name.endswith("/manifest.json") and b'"callback_url"' in blob.data:
                manifest = json_of(blob.data)
                if manifest.get("state") == "accepted" and manifest.get("callback_url"):
                    notice = state.get(f"{NOTICES}{manifest['batch_id']}.json")
                    waiting += notice is None or b'"pending"' in notice.data
        return chunks + waiting

    async def drive(self) -> None:
        self.broker = Broker(self.world_time, self.rng, self.bus_weather)
        if self.scenario.family not in BASIC:
            self.broker.idle_wait_s = 30.0
        self.bus_weather.take(self.scenario)
        for instance in self.instances:
            instance.start()
        clients = [
            self.spawn(self._at(s.at_s, callers.submit(self, s)), f"client {s.label}") for s in self.scenario.submits
        ]
        for crash in self.scenario.crashes:
            self.spawn(self.faults.crash_later(crash), "crash")
        platform.start(self)
        self.spawn(self.looks.watch(), "looks")  # every partition holding messages looked at within its bound
        for at_s, n in self.scenario.cancels:
            self.spawn(self.cancels.issue(at_s, n), "cancel")
        await asyncio.gather(*clients)
        end = self.scenario.fault_end_s
        while self.loop.time() < end or self.work_left():
            # A hang is a fault too: it holds its place until functionTimeout restarts the worker (limits seeds 231
            # and 341: hangs one after another under HANDLER_MAX_IN_FLIGHT=1, and a stuck chunk's, till 3,600 s).
            if self.loop.time() > max(end, self.fault_hang_s + FUNCTION_TIMEOUT_S + RESTART_S) + SETTLE_S:
                self.violate(
                    f"{self.work_left()} chunk message(s) or notice(s) pending {SETTLE_S:.0f} s after the last fault"
                )
                break
            await asyncio.sleep(5.0 if self.scenario.family in BASIC or self.work_left() else 60.0)
        self.note("quiet: checking the outcome through the status route and the batch list")
        self.run_transactions = sum(self.account.transactions.values())
        for instance in self.instances:
            if not instance.alive:
                instance.start()
        await final_checks(self)
        await platform.reached(self)

    @staticmethod
    async def _at(at_s: float, coro: Awaitable[None]) -> None:
        await asyncio.sleep(at_s)
        await coro


def run(seed: int, *, faults: bool = True, family: str = "random", scenario: Scenario | None = None,
        seen: list[World] | None = None) -> Outcome:  # fmt: skip
    """One seed, one exact schedule: the scenario it draws, run in a fresh world; the invariants it broke. The
    world itself is appended to `seen`, if given (its records: `calls`, `receiver`, `storage_log`...).

    The garbage collector is off during the run (after collecting what earlier seeds left): a collection's timing
    depends on everything the process allocated before, and what it finalizes (an unclosed async generator's
    `aclose`, a transport's callbacks) lands on the loop, so with it on a seed's schedule could depend on the seeds
    run before it in the same process (`--jobs`, the mutant hunts, the test workers) rather than on the seed."""
    gc.collect()
    gc.disable()
    try:
        return _run(seed, scenario or families.draw(seed, faults=faults, family=family), seen)
    finally:
        gc.enable()


def _run(seed: int, scenario: Scenario, seen: list[World] | None) -> Outcome:
    world = World(seed, scenario)
    if seen is not None:
        seen.append(world)
    with (
        patched(random.Random(f"app-{seed}")),
        held_watched(world),
        routed(),
        routed_notices(world.receiver),
        fences_heard(world),  # the `fenced` feature (`sim.straddle`)
    ):
        asyncio.set_event_loop(world.loop)
        try:
            main = world.loop.create_task(world.drive(), context=contextvars.Context())
            world.loop.run_until_complete(_bounded(main, world))
        except Stalled as e:
            world.violate(f"stalled: {e}")
        except Violation as e:
            world.violate(str(e))
        finally:
            _shutdown(world)
            asyncio.set_event_loop(None)
    accepted = sum(1 for a in world.answers.values() if 202 in a)
    return Outcome(seed, scenario, world.violations, world.trace, world.loop.time(), accepted,
                   world.accepted_items, world.run_transactions, frozenset(world.features))  # fmt: skip


async def _bounded(main: asyncio.Task[None], world: World) -> None:
    limit = world.scenario.fault_end_s + SETTLE_S + 3600 + (0.0 if world.scenario.stuck is None else STUCK_RUN_S)
    try:
        await asyncio.wait_for(main, limit)
    except TimeoutError:
        world.violate(f"the run did not end within {limit:.0f} virtual s")


def _shutdown(world: World) -> None:
    """Cancel what is left, in the order it was made (`World.pending`; `asyncio.all_tasks` is a weak set, whose
    order follows addresses), then close the loop."""
    loop = world.loop
    for _ in range(5):
        pending = world.pending()
        if not pending:
            break
        for task in pending:
            task.cancel()
        try:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        except Stalled:
            break
    # A run that ended stalled (time stopped: `sub-resolution-wait` does so on purpose) cannot finish its tasks'
    # cancellation; they are dropped with the loop, knowingly, not reported later as "Task was destroyed but it is
    # pending" by the garbage collector in whichever test runs next.
    for task in asyncio.all_tasks(loop):
        task._log_destroy_pending = False  # type: ignore[attr-defined]
    loop.close()
