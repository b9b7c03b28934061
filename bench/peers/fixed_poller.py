"""(b) The naive loop: GetMessages of one message; handle and delete it, or sleep a fixed second when empty."""

from __future__ import annotations

from bench.peers.base import Peer

INTERVAL_S = 1.0
VISIBILITY_S = 30  # the storage API's default


class FixedPoller(Peer):
    async def run(self) -> None:
        while self.running():
            batch = await self.queue.get(1, VISIBILITY_S)
            if not batch:
                await self.clock.sleep(INTERVAL_S)
                continue
            if await self.handle(batch[0]):
                await self.queue.delete(batch[0])
