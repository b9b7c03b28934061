"""A drainer that cannot renew its lease ends its async handler calls before the lease can lapse for the others, on
the real Azurite.

The handler limits count a drainer's calls under its lease: once the lease lapses, the next holder claims the room
those calls hold. Renewals cannot be made while storage is down, so the holder ends its calls itself, as the function's
timeout would: the simulation's limits seed 101 had a call hang through a 16 s storage outage while its drainer's lease
lapsed, and the next holder's call ran beside it under HANDLER_MAX_IN_FLIGHT=1. Here the renewals fail (injected at the
lease client, as a reset connection would), the first call never returns, and a second instance drains a new batch
once the lease is free: never two calls at once, and the ended call's chunk is handled again (put back visible at once,
no attempt counted), its items once each in the results.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from azure.core.exceptions import ServiceRequestError
from azure.storage.blob.aio import BlobLeaseClient

from shared.core import layout
from shared.engine.drainer import Drainer
from shared.handlers import ChunkContext
from shared.ops.reports import read_batch_status
from shared.store.leases import LAPSE_MARGIN_S, DrainLease
from tests.app import handlers
from tests.app.conftest import RecordingPublisher, another_instance, drain_all, wait_for
from tests.app.sales import submit_ids


@pytest.mark.slow
async def test_a_drainer_that_cannot_renew_its_lease_ends_its_calls_before_the_next_holder_starts_one(
    configure: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = configure(
        publisher=RecordingPublisher(),
        HANDLER="tests.app.handlers:record",
        CHUNK_MAX_ITEMS="5",
        CHUNK_CONCURRENCY="1",
        HANDLER_MAX_IN_FLIGHT="1",
        LEASE_S="15",
    )
    queue = services.settings.work_queue
    first_batch = await submit_ids(services, [f"a-{i}" for i in range(5)])  # one chunk
    renew = BlobLeaseClient.renew
    doomed: set[str] = set()  # the first drainer's lease: storage answers none of its renewals

    async def failing_renew(self: BlobLeaseClient, **kwargs: Any) -> Any:
        if not doomed:
            doomed.add(self.id)
        if self.id in doomed:
            raise ServiceRequestError("storage did not answer (test)")
        return await renew(self, **kwargs)

    monkeypatch.setattr(BlobLeaseClient, "renew", failing_renew)
    in_flight, most, hung = [0], [0], asyncio.Event()

    async def first_hangs(context: ChunkContext) -> None:
        in_flight[0] += 1
        most[0] = max(most[0], in_flight[0])
        try:
            if not hung.is_set():
                hung.set()
                await asyncio.Event().wait()  # its downstream never answers
        finally:
            in_flight[0] -= 1

    handlers.on_chunk.append(first_hangs)
    first = asyncio.create_task(Drainer(services, queue).run())
    lease = services.storage.container(services.settings.state_container).get_blob_client(layout.lease_blob(queue, 0))

    async def lease_free() -> bool:
        return (await lease.get_blob_properties()).lease.state != "leased"

    try:
        await hung.wait()
        await wait_for(lease_free, 60, "the first drainer's lease to be released or to lapse")
        second_batch = await submit_ids(services, [f"b-{i}" for i in range(5)])  # work for the next holder
        other = another_instance(services)
        try:
            await Drainer(other, queue).run()  # takes the lease and the whole limit
        finally:
            await other.storage.close()
        assert most[0] == 1, "two handler calls in flight under HANDLER_MAX_IN_FLIGHT=1"
        report = await asyncio.wait_for(first, 30)
        assert report.outcome == "lease-lost"
    finally:
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)

    handlers.on_chunk.clear()
    await drain_all(services)
    for batch_id in (first_batch, second_batch):
        status = await read_batch_status(services, batch_id)
        assert status["status"] == "completed"
        assert status["items"] == {"total": 5, "succeeded": 5, "failed": 0, "pending": 0}


async def test_a_holder_does_not_wait_out_a_remainder_below_the_clocks_resolution(
    configure: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`DrainLease.lapsing` returns once the lease is within a millisecond of its margin: a remainder below the
    clock's resolution was slept again and again at one instant (the simulation's limits seed 808 spun there)."""
    services = configure()
    state = await services.storage.ensure_container(services.settings.state_container)
    lease = DrainLease(state, services.settings.work_queue, 0, lease_s=60)
    assert await lease.acquire()
    try:
        # The lease stands a nanosecond short of the margin, whatever the clock says (as the simulated clock stood).
        monkeypatch.setattr(lease, "lapses_in", lambda: LAPSE_MARGIN_S + 1e-9)
        # A guard only: it returns at once (a spin would turn until this gives up).
        await asyncio.wait_for(lease.lapsing(), timeout=10)
    finally:
        await lease.release()
