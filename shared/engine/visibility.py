"""Keeping a held message invisible while its chunk waits and works.

A message received with a visibility timeout reappears once it passes; a chunk that waits for a place or runs a
slow handler must not be delivered twice meanwhile, so its visibility is extended at 60% of the timeout, under
the message's lock (settling takes the same lock, so an extension never races a delete or a rewrite).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from shared.store.received import Received, epoch_ms
from shared.store.storage import translated

EXTEND_AT = 0.6  # of the visibility timeout


async def keeping_invisible(
    item: Received,
    work: Awaitable[None],
    *,
    visibility_s: int,
    clock: Callable[[], float],
    extended: Callable[[int], None],
) -> None:
    """Run `work`, extending `item`'s visibility until it ends; `extended(visible_at_ms)` after each extension.
    Raises what `work` raised; cancelled, it cancels `work` and waits for it."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            wait = max(0.1, item.received_at + visibility_s * EXTEND_AT - clock())
            done, _ = await asyncio.wait({task}, timeout=wait)
            if done:
                task.result()
                return
            async with item.lock, translated(f"extend visibility of {item.message.id}"):
                if task.done():
                    continue
                updated = await item.queue.update_message(
                    item.message, pop_receipt=item.pop_receipt, visibility_timeout=visibility_s
                )
                item.message.pop_receipt = updated.pop_receipt
            item.received_at = clock()
            item.visible_at_ms = epoch_ms() + visibility_s * 1000
            extended(item.visible_at_ms)
    finally:
        if not task.done():
            task.cancel()
        # Also when it failed just as extending did: its error is superseded, never left unretrieved.
        await asyncio.gather(task, return_exceptions=True)
