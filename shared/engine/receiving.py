"""One page of a lane: exactly one GetMessages, sized by the handler limits when they are set."""

from __future__ import annotations

from collections.abc import Callable

from shared.core.settings import Settings
from shared.engine.limits import HandlerLimits
from shared.store.received import Received, epoch_ms
from shared.store.storage import Storage, request_id, translated


async def receive_page(
    storage: Storage,
    settings: Settings,
    lane: str,
    limits: HandlerLimits | None,
    clock: Callable[[], float],
    most: int | None = None,
) -> tuple[list[Received], int]:
    """The messages received (hidden for VISIBILITY_TIMEOUT_S) and when they become visible again (ms);
    `most`: fewer than a page."""
    queue = storage.queue(lane)
    async with translated(f"receive from {lane}"):
        most = min(most or settings.receive_batch, settings.receive_batch)
        if limits is not None:
            most = limits.page_size(most, settings.visibility_timeout_s, settings.chunk_max_items)
        pager = queue.receive_messages(
            messages_per_page=most,
            visibility_timeout=settings.visibility_timeout_s,
            client_request_id=request_id(),
        ).by_page()
        visible_at = epoch_ms() + settings.visibility_timeout_s * 1000
        try:
            page = await pager.__anext__()  # exactly one GetMessages
        except StopAsyncIteration:  # the SDK's way of saying the queue had nothing visible
            return [], visible_at
        visible_at = epoch_ms() + settings.visibility_timeout_s * 1000
        return [Received(m, queue, clock(), visible_at) async for m in page], visible_at
