"""(c) Simple capped exponential back-off: one message per GetMessages; when empty, sleep the current interval,
then double it up to the ceiling (1 s floor, 60 s ceiling); any message resets it to the floor."""

from __future__ import annotations

from bench.peers.base import Peer

FLOOR_S = 1.0
CEILING_S = 60.0
EXPONENT = 2.0
VISIBILITY_S = 30


def next_interval(current_s: float, *, found: bool) -> float:
    """The interval after a poll: the floor after work, else `min(ceiling, current * exponent)`."""
    return FLOOR_S if found else min(CEILING_S, current_s * EXPONENT)


class CappedBackoffPoller(Peer):
    async def run(self) -> None:
        interval = FLOOR_S
        while self.running():
            batch = await self.queue.get(1, VISIBILITY_S)
            if batch:
                if await self.handle(batch[0]):
                    await self.queue.delete(batch[0])
                interval = next_interval(interval, found=True)
                continue
            await self.clock.sleep(interval)
            interval = next_interval(interval, found=False)
