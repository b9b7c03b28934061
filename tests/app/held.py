"""A chunk held back from the drain, so that its batch is not final while its other chunks drain and park: a final
batch's parked chunks are never replayed (issue 36 item 12), so a replay test needs a batch still processing."""

from __future__ import annotations

from typing import Any

from shared.batch import envelope


class Held:
    """A chunk kept from the drain the way a drainer's receive hides it (for an hour), so that its batch is not
    final while its other chunks drain and park (a final batch's parked chunks are never replayed)."""

    def __init__(self, queue: Any, message: Any) -> None:
        self.queue, self.message = queue, message

    async def release(self) -> None:
        await self.queue.update_message(self.message, visibility_timeout=0)


async def hold_first_chunk(services: Any) -> Held:
    """Hide the lowest-numbered chunk waiting on the work queue; every other one stays visible."""
    work = services.storage.queue(services.settings.work_queue)
    received = [m async for m in work.receive_messages(max_messages=32, visibility_timeout=3600)]
    assert received, "a chunk to hold"
    first = min(received, key=lambda m: envelope.decode(m.content).header.chunk)
    for m in received:
        if m is not first:
            await work.update_message(m, visibility_timeout=0)
    return Held(work, first)
