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
        """Put the chunk back as it was before the hold, undelivered: its text sent again, the held message deleted
        (the hold is the test's, not a drainer's delivery; a chunk delivered past MAX_DEQUEUE_COUNT is parked)."""
        await self.queue.send_message(self.message.content)
        await self.queue.delete_message(self.message)


async def hold_first_chunk(services: Any) -> Held:
    """Hide the lowest-numbered chunk waiting on the work queue; every other one stays visible, and undelivered: it
    is received one message at a time, in the queue's order, so the chunks before it (none, as a submit enqueues
    them in order) are the only others a receive counts a delivery of (a chunk delivered past MAX_DEQUEUE_COUNT
    is parked unrun)."""
    work = services.storage.queue(services.settings.work_queue)
    peeked = await work.peek_messages(max_messages=32)
    assert peeked, "a chunk to hold"
    lowest = min(envelope.decode(m.content).header.chunk for m in peeked)
    passed = []
    async for m in work.receive_messages(messages_per_page=1, visibility_timeout=3600):
        if envelope.decode(m.content).header.chunk == lowest:
            for other in passed:
                await work.update_message(other, visibility_timeout=0)
            return Held(work, m)
        passed.append(m)
    raise AssertionError(f"chunk {lowest} was not received")
