"""A submit in the process whose drainer is at work on its partition tells that drainer of its lane's mark at
once (`Services.lane_news`), as the drainer's next listing would: a newcomer's batch waits for no listing.

Real Azurite, the app's own submit and drain engine; Service Bus is the recording publisher (see conftest).
"""

from __future__ import annotations

import asyncio

import pytest

from shared.engine.drainer import Drainer
from shared.handlers import ChunkContext
from tests.app import handlers
from tests.app.conftest import RecordingPublisher
from tests.app.tenants import RECORD, submit_to


@pytest.mark.slow
async def test_a_submit_here_hands_its_lane_to_the_drainer_at_work_without_a_listing(configure) -> None:
    """Behind a backlog whose chunks never leave the handler, with no listing of the lanes after the newcomer's
    submit: the newcomer is handled only if its submit told the drainer of its lane (before, it waited for a
    listing: on a busy event loop, the watcher's cadence, a ListQueues and at times one that missed the mark)."""
    services = configure(HANDLER=RECORD, CHUNK_MAX_ITEMS="1", CHUNK_CONCURRENCY="2", RECEIVERS="1", RECEIVE_BATCH="2")
    services.publisher = RecordingPublisher()
    big = await submit_to(services, "a", 20, tenant="acme")
    drainer = Drainer(services, services.settings.work_queue)
    stuck, release, newcomer = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def hook(context: ChunkContext) -> None:
        if context.batch_id == big:
            stuck.set()
            await release.wait()  # the receiver's page holds its places and never ends
        else:
            newcomer.set()

    handlers.on_chunk.append(hook)
    drain = asyncio.create_task(drainer.run())
    try:
        await asyncio.wait_for(stuck.wait(), 30)
        drainer.lanes.due = lambda: False  # no listing from here on: the watcher never finds the newcomer's mark
        listing = drainer.lanes._listing
        if listing is not None:  # one under way may have begun before the newcomer's mark: let it end first
            await asyncio.gather(listing, return_exceptions=True)
        await submit_to(services, "b", 1, tenant="bolt")
        await asyncio.wait_for(newcomer.wait(), 30)
    finally:
        release.set()
        report = await drain
    assert report.chunks_done == 21
    assert services.lane_news == {}, "a drainer whose session ended hears no more"
