"""An instance of the function host in the simulated world: its own `Services` (storage clients over the
world's transport, a publisher, in-memory state), a Service Bus listener taking one trigger event at a time to
the app's router (`shared.router.route`, as `function_app.drain` does), and the user's handler as the world
sees it (`SimHandler`). A crash cancels every task it started and drops its memory; a function that outlives
`functionTimeout` ends its worker, as the real host's restart does."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Coroutine, Sequence
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
from sim import storage as simstorage
from sim.account import CONNECTION_STRING
from sim.bus import SimPublisher
from sim.clock import SKEW_S
from sim.scenario import Scenario

# The world (`sim.world.World`) is passed in, not imported: it imports this module.
World = Any

log = logging.getLogger(__name__)

INSTANCE: contextvars.ContextVar[Instance | None] = contextvars.ContextVar("sim_instance", default=None)
FUNCTION_TIMEOUT_S = 300.0  # host.json functionTimeout


def environment(scenario: Scenario) -> dict[str, str]:
    env = {
        "AzureWebJobsStorage": CONNECTION_STRING,
        "ServiceBusConnection": "Endpoint=sb://127.0.0.1:9;SharedAccessKeyName=k;SharedAccessKey=s;UseDevelopmentEmulator=true;",
        "TRIGGER_QUEUE": "trigger",
        "FALLBACK_SCHEDULE": "0 */10 * * * *",
        "WORK_QUEUE": "work",
        "BATCHES_CONTAINER": "batches",
        "RESULTS_CONTAINER": "results",
        "STATE_CONTAINER": "state",
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


class SimHandler:
    """The user's handler as the world sees it: a downstream shared by every instance, which records each call
    and decides each item's outcome from the item itself (`sim.scenario` writes the mode into it)."""

    def __init__(self, world: World, instance: Instance) -> None:
        self.world, self.instance = world, instance

    async def __call__(self, items: Sequence[Any], context: ChunkContext, /) -> ChunkResult:
        world = self.world
        world.on_handler_start(self.instance, context)
        try:
            await asyncio.sleep(world.rng.uniform(0.001, 0.2))
            if world.rng.random() < world.scenario.handler_hang:
                world.note(f"handler hangs on {context.batch_id[:8]}/{context.chunk} at {self.instance.name}")
                world.hangs.append((self.instance.name, world.loop.time()))
                await asyncio.sleep(FUNCTION_TIMEOUT_S * 2)
            outcomes = []
            for item in items:
                key = f"{item['b']}/{item['n']}"
                seen = world.item_calls.get(key, 0) + 1
                world.item_calls[key] = seen
                mode = item["m"]
                if mode == "perm":
                    outcomes.append(ItemOutcome.failure("permanent", retryable=False))
                elif mode.startswith("t") and seen <= int(mode[1:]):
                    outcomes.append(ItemOutcome.failure("transient"))
                else:
                    outcomes.append(ItemOutcome.success(item["n"]))
            return ChunkResult(outcomes)
        finally:
            world.on_handler_end(self.instance)


class Instance:
    """One Functions host process (see the module docstring)."""

    def __init__(self, world: World, name: str, skew_s: float) -> None:
        self.world, self.name, self.skew_s = world, name, skew_s
        self.tasks: set[asyncio.Task[Any]] = set()
        self.alive = False
        self.incarnation = 0
        self.services: Services | None = None
        self.in_flight = 0

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
            handler=SimHandler(world, self),
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
            services = self.services
            assert services is not None
            try:
                event = TriggerEvent.decode(delivery.body)
                started = world.loop.time()
                report = await asyncio.wait_for(route(services, event), FUNCTION_TIMEOUT_S)
                world.on_session(self, event, report, world.loop.time() - started)
                world.broker.complete(delivery)
            except MalformedEvent as e:
                world.note(f"malformed event at {self.name}: {e}")
                world.broker.abandon(delivery)
            except TimeoutError:
                world.note(f"function timeout at {self.name}: the worker restarts")
                world.spawn(world.restart(self, 5.0), "restart after timeout")
                return
            except Exception as e:  # the host logs it and abandons the message, as the real trigger does
                world.note(f"drain at {self.name} failed: {type(e).__name__}: {str(e)[:120]}")
                world.broker.abandon(delivery)
