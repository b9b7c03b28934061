"""An instance of the function host in the simulated world: its own `Services` (storage clients over the
world's transport, a publisher, in-memory state), a Service Bus listener taking one trigger event at a time to
the app's router (`shared.router.route`, as `function_app.drain` does), and the user's handler as the world
sees it (`SimHandler`). A crash cancels every task it started and drops its memory; a function that outlives
`functionTimeout` ends its worker, as the real host's restart does."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from azure.storage.blob.aio import BlobServiceClient
from azure.storage.queue.aio import QueueServiceClient

from shared.core.errors import MalformedEvent
from shared.core.events import TriggerEvent
from shared.handlers import ChunkContext, ChunkResult, ItemOutcome
from shared.router import route
from shared.services import Services
from shared.store.fallback_state import BackoffStore
from shared.store.storage import Storage, configured
from shared.telemetry.metering import TransactionCounter
from shared.watch import lookout
from sim import stuck
from sim.bus import SimPublisher
from sim.clock import SKEW_S
from sim.scenario import Scenario
from sim.storage import transport as simstorage
from sim.storage.account import CONNECTION_STRING

# The world (`sim.world.World`) is passed in, not imported: it imports this module.
World = Any

log = logging.getLogger(__name__)

INSTANCE: contextvars.ContextVar[Instance | None] = contextvars.ContextVar("sim_instance", default=None)
FUNCTION_TIMEOUT_S = 300.0  # host.json functionTimeout


RESULTS = "results"  # the results container (a fault span may aim at it: `sim.families.aim_at_results`)
STATE = "state"  # the state container (leases, the handler limits' allocation: `sim.claim_churn` aims at it)


def environment(scenario: Scenario) -> dict[str, str]:
    env = {
        "AzureWebJobsStorage": CONNECTION_STRING,
        "ServiceBusConnection": "Endpoint=sb://127.0.0.1:9;SharedAccessKeyName=k;SharedAccessKey=s;UseDevelopmentEmulator=true;",
        "TRIGGER_QUEUE": "trigger",
        "FALLBACK_SCHEDULE": "0 */10 * * * *",
        "WORK_QUEUE": "work",
        "BATCHES_CONTAINER": "batches",
        "RESULTS_CONTAINER": RESULTS,
        "STATE_CONTAINER": STATE,
        "HANDLER": "shared.handlers.noop:handle",
    }
    env.update(scenario.settings)
    return env


@dataclass
class HandlerCall:
    instance: str
    batch_id: str
    chunk: int
    started_s: float


@dataclass
class Call:
    """One handler call (`World.calls`): who ran it, for which chunk, when it started and ended (virtual s; None
    if it never ended: a hang, or its instance died), and the outcome it returned for each item, by the item's
    key (`<submit label>/<index>`): "ok", "failed" (retryable) or "failed-permanent"."""

    instance: str
    batch_id: str
    chunk: int
    attempt: int
    kind: str  # "async" or "sync"
    asked_s: float  # when the engine asked for the call (for a sync handler: when it asked for a thread)
    started_s: float
    ended_s: float | None = None
    outcomes: tuple[tuple[str, str], ...] = ()


def decide(world: World, items: Sequence[Any], call: Call) -> ChunkResult:
    """Each item's outcome from the item itself (`sim.scenario` writes the mode into it: "ok", "tN" fails its
    first N calls, "perm" always fails)."""
    outcomes, said = [], []
    for item in items:
        key = f"{item['b']}/{item['n']}"
        seen = world.item_calls.get(key, 0) + 1
        world.item_calls[key] = seen
        mode = item["m"]
        if mode == "perm":
            outcomes.append(ItemOutcome.failure("permanent", retryable=False))
            said.append((key, "failed-permanent"))
        elif mode.startswith("t") and seen <= int(mode[1:]):
            outcomes.append(ItemOutcome.failure("transient"))
            said.append((key, "failed"))
        else:
            outcomes.append(ItemOutcome.success(item["n"]))
            said.append((key, "ok"))
    call.outcomes = tuple(said)
    return ChunkResult(outcomes)


class SimHandler:
    """The user's handler as the world sees it: a downstream shared by every instance, which records each call
    (`World.calls`) and decides each item's outcome from the item itself (`decide`)."""

    def __init__(self, world: World, instance: Instance) -> None:
        self.world, self.instance = world, instance

    def start(self, context: ChunkContext, kind: str, asked_s: float) -> Call:
        world = self.world
        world.sessions.on_handler_start(self.instance, context)
        call = Call(self.instance.name, context.batch_id, context.chunk, context.attempt, kind, asked_s,
                    world.loop.time())  # fmt: skip
        world.calls.append(call)
        return call

    def hangs(self, context: ChunkContext, items: Sequence[Any]) -> bool:
        world = self.world
        drawn = world.rng.random() < world.scenario.handler_hang  # drawn at every call, stuck or not
        always = stuck.always(world, items, context)
        if drawn or always:
            world.note(f"handler hangs on {context.batch_id[:8]}/{context.chunk} at {self.instance.name}")
            world.hangs.append((self.instance.name, world.loop.time()))
            if stuck.a_fault(world, context, always=always):
                world.fault_hang_s = world.loop.time()
            return True
        return False

    async def __call__(self, items: Sequence[Any], context: ChunkContext, /) -> ChunkResult:
        world = self.world
        call = self.start(context, "async", world.loop.time())
        try:
            await asyncio.sleep(world.rng.uniform(*world.scenario.handler_s))
            if self.hangs(context, items):
                await asyncio.sleep(FUNCTION_TIMEOUT_S * 2)
            result = decide(world, items, call)
            call.ended_s = world.loop.time()
            return result
        finally:
            world.sessions.on_handler_end(self.instance)


class SimSyncHandler(SimHandler):
    """A plain-function handler, run on a thread (`ThreadPool`). The call decides at once and leaves its
    duration to the thread (`ThreadPool.pending`), which holds for that long and then ends the call (`end`)."""

    def __call__(self, items: Sequence[Any], context: ChunkContext, /) -> ChunkResult:  # type: ignore[override]
        world = self.world
        call = self.start(context, "sync", self.instance.pool.asked_s)
        world.features.add("sync")
        busy_s = world.rng.uniform(*world.scenario.handler_s)
        if self.hangs(context, items):
            busy_s += FUNCTION_TIMEOUT_S * 2
        self.instance.pool.pending = (self, call, busy_s)
        return decide(world, items, call)

    def end(self, call: Call) -> None:
        call.ended_s = self.world.loop.time()
        self.world.sessions.on_handler_end(self.instance)


class ThreadPool:
    """The threads of one host process on the virtual clock. `start`: a thread of its own for a call (the app's
    `shared.engine.sync_calls`), begun after a start latency (`Scenario.thread_start_s`: a busy machine starts
    threads late). `run`: one of `threads` shared threads (the default executor `asyncio.to_thread` uses), a call
    waiting for a free one. Either way a sync handler's call holds its thread for the call's duration and runs on
    if the task that awaited it is cancelled (a thread cannot be); only its process's death ends it. The wait
    shows as `Call.started_s - Call.asked_s`."""

    def __init__(self, instance: Instance, threads: int) -> None:
        self.instance = instance
        self.threads = asyncio.Semaphore(threads)
        self.asked_s = 0.0
        self.pending: tuple[SimSyncHandler, Call, float] | None = None  # the call a thread's function just made

    def start(self, func: Callable[[], Any]) -> asyncio.Future[Any]:
        return self._spawn(func, shared=False)

    def run(self, func: Callable[[], Any]) -> asyncio.Future[Any]:
        return self._spawn(func, shared=True)

    def _spawn(self, func: Callable[[], Any], *, shared: bool) -> asyncio.Future[Any]:
        world = self.instance.world
        future: asyncio.Future[Any] = world.loop.create_future()
        self.instance.spawn(self._thread(func, future, world.loop.time(), shared), "thread")
        return future

    async def _thread(self, func: Callable[[], Any], future: asyncio.Future[Any], asked_s: float,
                      shared: bool) -> None:  # fmt: skip
        world = self.instance.world
        if shared:
            await self.threads.acquire()
        else:
            low, high = world.scenario.thread_start_s
            await asyncio.sleep(world.rng.uniform(low, high))
        try:
            self.asked_s, self.pending = asked_s, None
            try:
                result = func()
            except BaseException as e:  # delivered to the awaiting task, as the executor would
                if not future.done():
                    future.set_exception(e)
                return
            made, self.pending = self.pending, None  # this thread's own call, before another thread's
            if made is not None:
                handler, call, busy_s = made
                try:
                    await asyncio.sleep(busy_s)
                finally:
                    handler.end(call)
            if not future.done():
                future.set_result(result)
        finally:
            if shared:
                self.threads.release()


class Instance:
    """One Functions host process (see the module docstring)."""

    def __init__(self, world: World, name: str, skew_s: float) -> None:
        self.world, self.name, self.skew_s = world, name, skew_s
        self.tasks: dict[asyncio.Task[Any], None] = {}  # its tasks not done, in the order made (`World.pending`)
        self.alive = False
        self.incarnation = 0
        self.services: Services | None = None
        self.in_flight = 0
        self.pool = ThreadPool(self, 1)

    def start(self) -> None:
        world = self.world
        self.alive, self.incarnation = True, self.incarnation + 1
        incarnation = self.incarnation
        transport = simstorage.SimTransport(
            world.server,
            world.storage_weather,
            name=self.name,
            alive=lambda: self.alive and self.incarnation == incarnation,
        )
        self.pool = ThreadPool(self, world.scenario.threads)
        counter = TransactionCounter()
        storage = Storage(world.settings, counter)
        connection = CONNECTION_STRING
        storage.queues = configured(
            partial(QueueServiceClient.from_connection_string, connection, raw_request_hook=counter.hook("queue"),
                    transport=transport)
        )  # fmt: skip
        storage.blobs = configured(
            partial(BlobServiceClient.from_connection_string, connection, raw_request_hook=counter.hook("blob"),
                    transport=transport)
        )  # fmt: skip
        self.services = Services(
            settings=world.settings,
            storage=storage,
            publisher=SimPublisher(world.broker, world.settings.publish_timeout_s, lambda: self.alive),
            handler=(SimSyncHandler if world.scenario.handler == "sync" else SimHandler)(world, self),
            counter=counter,
            backoff=BackoffStore(storage, world.settings),
            watch=lookout.arm,
        )
        self.spawn(self.listen(incarnation), "listen")

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        context = contextvars.copy_context()
        context.run(INSTANCE.set, self)
        context.run(SKEW_S.set, self.skew_s)
        task: asyncio.Task[Any] = self.world.loop.create_task(coro, name=f"{self.name}: {name}", context=context)
        return task

    def crash(self) -> None:
        self.alive = False
        self.services = None
        self.world.broker.holder_lost(self)
        for task in list(self.tasks):
            task.cancel()
        self.in_flight = 0

    async def listen(self, incarnation: int) -> None:
        """The host's Service Bus trigger: one event at a time to `drain`."""
        world = self.world
        while self.alive and self.incarnation == incarnation:
            delivery = await world.broker.take(self)
            count = delivery.delivery_count
            services = self.services
            assert services is not None
            try:
                event = TriggerEvent.decode(delivery.body)
                started = world.loop.time()
                report = await asyncio.wait_for(route(services, event), FUNCTION_TIMEOUT_S)
                world.sessions.on_session(self, event, report, world.loop.time() - started)
                world.sessions.settle(self, delivery, count)
            except MalformedEvent as e:
                world.note(f"malformed event at {self.name}: {e}")
                world.broker.abandon(delivery)
            except TimeoutError:
                world.note(f"function timeout at {self.name}: the worker restarts")
                world.spawn(world.faults.restart(self, 5.0), "restart after timeout")
                return
            except Exception as e:  # the host logs it and abandons the message, as the real trigger does
                world.note(f"drain at {self.name} failed: {type(e).__name__}: {str(e)[:120]}")
                world.broker.abandon(delivery)
