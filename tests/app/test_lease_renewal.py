"""A drain lease is kept while its session runs even when renewals fail or hang for a while: the handler limits
count a drainer's chunks in flight under its lease, so a lease that lapsed under a slow handler call let a second
drainer call the handler beside it (the simulator found it: RELIABILITY.md, "The simulation")."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from azure.core.exceptions import ServiceRequestError
from azure.storage.blob.aio import BlobLeaseClient

from shared.store.leases import DrainLease


@pytest.mark.slow
async def test_a_lease_outlives_a_failed_and_a_hanging_renewal(configure, monkeypatch):
    services = configure()
    state = await services.storage.ensure_container(services.settings.state_container)
    queue = services.settings.work_queue
    renew = BlobLeaseClient.renew
    calls: list[str] = []

    async def flaky_renew(self: BlobLeaseClient, **kwargs: Any) -> Any:
        calls.append("renew")
        if len(calls) == 1:
            raise ServiceRequestError("storage did not answer (test)")
        if len(calls) == 2:
            await asyncio.sleep(30)  # longer than the lease has left
        return await renew(self, **kwargs)

    monkeypatch.setattr(BlobLeaseClient, "renew", flaky_renew)
    held = DrainLease(state, queue, 0, lease_s=15)
    assert await held.acquire()
    try:
        await asyncio.sleep(18)  # past the lease's period: only a renewal keeps it

        assert len(calls) >= 3
        assert not await DrainLease(state, queue, 0, lease_s=15).acquire(), "the lease lapsed under its holder"
    finally:
        await held.release()
    assert held.released
