"""What the world sees of the host's work, and the checks it makes as it goes: the chunk messages each instance
received (`on_storage`, so a handler call is matched to its attempt), each handler call's start (the handler
limit, a refused submit, the manifest's state and committed attempt) and end, each drain session (its budget),
the thread a call the app hands off runs on (`offload`), and the settlement of a trigger message after its
function (`settle`, which may fail). Its records stay on the world (`held`, `in_flight`, `hangs`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from functools import partial
from typing import Any

from shared.batch import envelope
from shared.core.events import TriggerEvent
from shared.handlers import ChunkContext
from sim import stuck
from sim.checks import replays
from sim.host import FUNCTION_TIMEOUT_S, INSTANCE, Instance, SimSyncHandler

log = logging.getLogger(__name__)

SESSION_MARGIN_S = 60.0  # a drain session may run past DRAIN_BUDGET_S by finishing its chunks
OVERRUN = "budget + margin"  # the words of a session past DRAIN_BUDGET_S + SESSION_MARGIN_S

# The world (`sim.world.World`) is passed in, not imported: it imports this module.
World = Any


class Sessions:
    """The host's work as the world observes it (see the module docstring)."""

    def __init__(self, world: World) -> None:
        self.world = world

    def on_storage(self, operation: str, instance_name: str | None, detail: Any) -> None:
        """What the storage server did for whom: received chunk messages are remembered per instance, so a
        handler call can be matched to the attempt its chunk came from."""
        world = self.world
        if operation == "LeaseBlob":
            world.lapses.on_lease(instance_name, detail)
        elif operation == "QueueRead":
            world.looks.on_read(detail)
        elif operation == "PutMessage":
            replays.never_reopened(world, *detail)
        elif operation == "GetMessages" and instance_name is not None:
            for message_id, text in detail:
                try:
                    header = envelope.decode(text).header
                except Exception as e:  # a poison copy or a foreign message: not a chunk this check is about
                    log.debug("message %s is not a chunk: %s", message_id, e)
                    continue
                world.held.setdefault(instance_name, {})[message_id] = (header.batch_id, header.attempt, header.chunk)

    def on_handler_start(self, instance: Instance, context: ChunkContext) -> None:
        world = self.world
        world.in_flight += 1
        instance.in_flight += 1
        world.cancels.on_handler_start(context.batch_id)
        stuck.handed_past_last_attempt(world, context)
        limit = world.settings.handler_max_in_flight
        if limit and world.in_flight > limit:
            outliving = world.lapses.outliving()  # sync calls past a lease lapsed in an outage (docs/settings.md)
            if world.in_flight - outliving > limit:
                world.violate(f"{world.in_flight} handler calls in flight, HANDLER_MAX_IN_FLIGHT is {limit}")
            else:
                world.note(f"{world.in_flight} handler calls in flight, {outliving} of them sync past a lapsed lease")
        if context.batch_id in world.refused and not world.answers.get(context.batch_id, []).count(202):
            world.violate(f"handler called for batch {context.batch_id[:8]}, whose submit was refused")
        manifest = world.manifest(context.batch_id)
        candidates = {
            attempt
            for (batch, attempt, chunk) in world.held.get(instance.name, {}).values()
            if batch == context.batch_id and chunk == context.chunk
        }
        if manifest is None or manifest.get("state") != "accepted":
            world.violate(
                f"handler called for {context.batch_id[:8]}/{context.chunk} while its manifest is "
                f"{None if manifest is None else manifest.get('state')}"
            )
        elif candidates and manifest.get("attempt") not in candidates:
            world.violate(
                f"handler called for {context.batch_id[:8]}/{context.chunk} of abandoned attempt "
                f"{sorted(candidates)} (committed: {manifest.get('attempt')})"
            )
        world.note(f"{instance.name} handles {context.batch_id[:8]}/{context.chunk} (attempt {context.attempt})")

    def on_handler_end(self, instance: Instance) -> None:
        self.world.in_flight -= 1
        instance.in_flight -= 1

    def on_session(self, instance: Instance, event: TriggerEvent, report: Any, took_s: float) -> None:
        world = self.world
        world.note(
            f"{instance.name} {event.reason.value} {event.queue}/{event.slot}: {report.outcome} in {took_s:.1f} s"
        )
        world.lapses.on_session(instance.name, event.queue, event.slot, took_s)
        if report.outcome == "budget":
            world.features.add("budget")
        bound = world.settings.drain_budget_s + SESSION_MARGIN_S
        began = world.loop.time() - took_s
        # A session waits for its chunks in flight: one whose handler call hung ends with that call; with
        # HANDLER_MAX_IN_FLIGHT set, a call hung anywhere holds its room, and the others wait for it too.
        shared_room = bool(world.settings.handler_max_in_flight)
        waited = any(
            (shared_room or name == instance.name) and began - FUNCTION_TIMEOUT_S <= at for name, at in world.hangs
        )
        if took_s > bound and not waited:
            world.violate(
                f"{event.reason.value} session on {instance.name} took {took_s:.0f} s ({OVERRUN} {bound:.0f} s)"
            )

    def offload(self, executor: Executor | None, func: Callable[..., Any]) -> asyncio.Future[Any] | None:
        """A function the app hands to a thread: on an executor of its own (`shared.engine.sync_calls`: a thread
        per call), a thread that starts after a latency; the user's sync handler sent to the default executor
        (`asyncio.to_thread`), one of its instance's bounded threads; anything else inline."""
        instance = INSTANCE.get()
        if instance is None:
            return None
        if executor is not None:
            return instance.pool.start(func)
        handler = func.args[0] if isinstance(func, partial) and func.args else None  # to_thread's (ctx.run, f, ...)
        return instance.pool.run(func) if isinstance(handler, SimSyncHandler) else None

    def settle(self, instance: Instance, delivery: Any, count: int) -> None:
        """Complete a trigger message after its function returned; the complete may fail (a fault of the scenario,
        or its lock lapsed under failed renewals): the message is delivered again."""
        world = self.world
        if world.scenario.settle_fail and world.rng.random() < world.scenario.settle_fail:
            world.features.add("settle-failed")
            world.note(f"{instance.name}: completing its trigger message failed")
            world.broker.settle_failed(delivery)
        elif not world.broker.complete(delivery, count):
            world.features.add("settle-failed")
            world.note(f"{instance.name}: its trigger message's lock was lost before the complete")
