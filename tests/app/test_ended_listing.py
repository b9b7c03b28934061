"""A drainer's shared listing of the ended batches (`ChunkWork._is_ended`) outlives the chunks that asked for it:
when they are all cancelled (their session ended, their lease lapsed) and the listing then fails, its failure is
retrieved, not left to the event loop's "Task exception was never retrieved" (found by `lifecycle` seed 124)."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

from shared.core.errors import StorageUnavailable
from shared.engine.chunks import ChunkWork
from shared.store import ended


async def test_an_ended_listing_that_fails_after_every_chunk_that_asked_was_cancelled_is_retrieved(
    configure, monkeypatch
):
    services = configure()
    batches = services.storage.container(services.settings.batches_container)
    asked = asyncio.Event()

    async def listed(*args: Any, **kwargs: Any) -> ended.Listing:  # storage answers slowly, then fails (injected)
        asked.set()
        await asyncio.sleep(0.05)
        raise StorageUnavailable("list ended batches", "storage is down (injected)")

    monkeypatch.setattr(ended, "listed", listed)
    unretrieved: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: unretrieved.append(context))
    try:
        work = ChunkWork(services, batches, time.monotonic)
        chunk = asyncio.ensure_future(work._is_ended("b" * 32))
        await asyncio.wait_for(asked.wait(), 10)
        chunk.cancel()  # the only chunk that asked is cancelled while the listing is under way
        listing = work._ended_listing
        assert listing is not None
        await asyncio.wait([listing], timeout=10)
        assert listing.done()
        assert not listing.cancelled()  # it failed; its exception is not read here
        del work, chunk, listing  # the drainer is gone: its listing task is collected
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert [c.get("message") for c in unretrieved] == []
