"""The faults a scenario plans, as the world's parts ask for them: a storage call failing or slow
(`storage`), a send refused or its link dropped (`send`), the host renewing no lock (`renewing`), Service Bus
away (`bus_down`), and an instance crashing and coming back (`crash_later`, `restart`). Each fault that occurs
is recorded as a feature reached (`World.features`)."""

from __future__ import annotations

import asyncio
from typing import Any

from sim.host import Instance
from sim.scenario import Crash, Span

# The world (`sim.world.World`) is passed in, not imported: it imports this module.
World = Any


class Faults:
    """The scenario's fault plan, asked at the moment of each call (see the module docstring)."""

    def __init__(self, world: World) -> None:
        self.world = world

    def storage(self, operation: str) -> str | None:
        world = self.world
        now = world.loop.time()
        spans: list[Span] = world.scenario.storage_spans
        for span in spans:
            if operation.startswith(span.op) and span.start_s <= now < span.end_s and world.rng.random() < span.rate:
                if span.kind in ("slow", "late"):
                    world.features.add("slow-storage")
                return span.kind
        return None

    def send(self) -> str | None:
        world = self.world
        now = world.loop.time()
        sends: list[Span] = world.scenario.sends
        for span in sends:
            if span.start_s <= now < span.end_s:
                world.features.add("send-refused" if span.kind == "refused" else "link-error")
                return span.kind
        return None

    def renewing(self) -> bool:
        """Whether the host renews the lock of a message it takes now (a lock taken in a span lapses after
        LOCK_S while its function may still run)."""
        world = self.world
        now = world.loop.time()
        renews = not any(s.start_s <= now < s.end_s for s in world.scenario.renewals)
        if not renews:
            world.features.add("renewal-lost")
        return renews

    def bus_down(self) -> bool:
        now = self.world.loop.time()
        return any(s.start_s <= now < s.end_s for s in self.world.scenario.bus_spans)

    async def restart(self, instance: Instance, after_s: float) -> None:
        instance.crash()
        self.world.note(f"{instance.name} is down (its tasks cancelled, its memory gone)")
        await asyncio.sleep(after_s)
        instance.start()
        self.world.note(f"{instance.name} started again (incarnation {instance.incarnation})")

    async def crash_later(self, crash: Crash) -> None:
        await asyncio.sleep(crash.at_s)
        instance = self.world.instances[crash.instance]
        if instance.alive:
            await self.restart(instance, crash.down_s)
