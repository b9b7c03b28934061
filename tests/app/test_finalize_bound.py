"""A drain execution's finalize of the batches it touched is held to FINALIZE_S in all (real Azurite). It used to
take them one after another, each as long as storage took to answer: with listings answered late, several batches
held the execution past its budget's margin (the simulation's stale-cancel family, a first draw: 93 s for a bound of
90). A batch left unchecked is finalized by whoever reads it next: here its status read."""

from __future__ import annotations

import asyncio
from typing import Any

from shared.ops import lifecycle
from shared.ops.reports import read_batch_status
from shared.store import ended
from tests.app.conftest import RecordingPublisher, drain_all
from tests.app.sales import submit_ids

WAIT_S = 30  # far past FINALIZE_S here: a finalize that waits for the unanswered listing fails the test


async def test_a_drains_finalize_stops_at_its_bound_and_a_status_read_finalizes_what_it_left(configure, monkeypatch):
    services = configure(publisher=RecordingPublisher())
    batches = sorted([await submit_ids(services, ["a-1", "a-2"]), await submit_ids(services, ["b-1"])])
    await drain_all(services)  # every chunk recorded; the router's finalize not run
    listing, never = lifecycle.list_counted, asyncio.Event()

    async def unanswered(container: Any, batch_id: str) -> Any:
        if batch_id == batches[0]:
            await never.wait()  # storage never answers this listing
        return await listing(container, batch_id)

    monkeypatch.setattr(lifecycle, "list_counted", unanswered)
    monkeypatch.setattr(lifecycle, "FINALIZE_S", 0.5)
    await asyncio.wait_for(lifecycle.finalize_all(services, batches), WAIT_S)
    monkeypatch.undo()
    container = services.storage.container(services.settings.batches_container)
    assert [(await ended.read_manifest(container, b))[0].final_status for b in batches] == [None, None], (
        "the second batch waited behind the first: unchecked"
    )
    assert [(await read_batch_status(services, b))["status"] for b in batches] == ["completed", "completed"]
    assert [(await ended.read_manifest(container, b))[0].final_status for b in batches] == ["completed"] * 2
