"""A sync handler's call keeps its place in HANDLER_MAX_IN_FLIGHT until its thread returns, whatever becomes of the
chunk that made it, on the real Azurite.

A failed visibility extension cancels its chunk's work wherever it waits, also while it awaits a sync handler's
thread, which runs on. The cancel used to give the call's place back at once: the same drainer admitted the next
chunk into it (the simulation's replay seed 627: three calls under a limit of 2), or the session ended, gave its
claim and its lease back and returned with the thread still running, out of reach of `functionTimeout` (replay
seed 658: two calls under a limit of 1 for about 500 s). Here the extension's answer is lost (storage applies it,
the SDK's retry meets a new pop receipt and is refused) while the first call blocks its thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from shared.core import layout
from shared.core.errors import SessionEnding
from shared.engine import fair_slots
from shared.engine.drainer import Drainer
from shared.engine.fair_slots import FairSlots
from shared.engine.limits import ALLOCATION_BLOB, HandlerLimits
from shared.ops.reports import read_batch_status
from shared.store.leases import DrainLease
from shared.store.storage import read_json
from tests.app import handlers
from tests.app.conftest import RecordingPublisher, drain_all, wait_for
from tests.app.sales import submit_ids
from tests.app.test_replay_job_start import answer_lost_once

VISIBILITY_S = 10  # the first extension comes 6 s after the receive
BUDGET_S = 15  # past the first extension and its refused retry: the next chunk is received before the budget ends
WAIT_S = 60  # the longest any event is waited for


def gated(configure: Any, **extra: str) -> Any:
    """Services whose sync handler blocks its first call's thread until the test opens its gate, under
    HANDLER_MAX_IN_FLIGHT=1."""
    return configure(
        publisher=RecordingPublisher(),
        HANDLER="tests.app.handlers:gated_sync",
        HANDLER_MAX_IN_FLIGHT="1",
        VISIBILITY_TIMEOUT_S=str(VISIBILITY_S),
        **extra,
    )


async def first_call_blocked(
    services: Any, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, list[Any], asyncio.Event, asyncio.Event]:
    """Submit the first batch, lose its chunk's first extension's answer, and name two events: its call began,
    and the second chunk's call began (a test adds what else decides it)."""
    gate, loop = handlers.gate, asyncio.get_running_loop()
    first = await submit_ids(services, ["a-1"])
    lost = answer_lost_once(monkeypatch, "PUT", "/messages/")  # the first extension: the blocked chunk's
    began, decided = asyncio.Event(), asyncio.Event()

    def started() -> None:
        loop.call_soon_threadsafe((decided if len(gate.started) > 1 else began).set)

    gate.on_start = started
    return first, lost, began, decided


async def leased(services: Any) -> bool:
    state = services.storage.container(services.settings.state_container)
    lease = state.get_blob_client(layout.lease_blob(services.settings.work_queue, 0))
    return bool((await lease.get_blob_properties()).lease.state == "leased")


@pytest.mark.slow
async def test_no_chunk_is_admitted_into_the_place_of_a_sync_call_whose_chunk_was_given_up(
    configure: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = gated(configure, DRAIN_BUDGET_S=str(BUDGET_S))
    first, lost, began, decided = await first_call_blocked(services, monkeypatch)
    gate = handlers.gate
    admit = HandlerLimits.admit

    @asynccontextmanager
    async def observed(self: HandlerLimits, items: int, ending: Any = None) -> AsyncIterator[None]:
        admitted = False
        try:
            async with admit(self, items, ending):
                admitted = True
                yield
        except SessionEnding:
            if not admitted:  # its session's budget ended while it waited for a place
                decided.set()
            raise

    monkeypatch.setattr(HandlerLimits, "admit", observed)
    drain = asyncio.ensure_future(drain_all(services))
    try:
        await asyncio.wait_for(began.wait(), WAIT_S)
        second = await submit_ids(services, ["b-1"])  # received once the failed extension gives the first chunk up
        await asyncio.wait_for(decided.wait(), WAIT_S)
        assert lost, "the first chunk's extension lost its answer"
        assert gate.started == [first], "a second call started beside a running one under HANDLER_MAX_IN_FLIGHT=1"
        state = services.storage.container(services.settings.state_container)
        claims = (await read_json(state, ALLOCATION_BLOB))[0]["drainers"]
        assert claims[layout.lease_blob(services.settings.work_queue, 0)]["chunks"] == 1
        assert await leased(services)
    finally:
        gate.open.set()
    await asyncio.wait_for(drain, WAIT_S)

    async def completed() -> bool:  # the first chunk's message reappears a visibility timeout after its extension
        await drain_all(services)
        statuses = [(await read_batch_status(services, b))["status"] for b in (first, second)]
        return statuses == ["completed", "completed"]

    await wait_for(completed, WAIT_S, "both batches completed")
    assert gate.most == 1, "two handler calls in flight under HANDLER_MAX_IN_FLIGHT=1"


@pytest.mark.slow
async def test_a_session_keeps_its_claim_and_lease_until_a_sync_call_whose_chunk_it_gave_up_returns(
    configure: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = gated(configure)
    gate = handlers.gate
    await submit_ids(services, ["a-1"])
    lost = answer_lost_once(monkeypatch, "PUT", "/messages/")
    release_claim, release_lease, record_quiet = HandlerLimits.release, DrainLease.release, Drainer._record_quiet
    received_all = asyncio.Event()  # the session's receivers are done: next it gives its claim and lease back

    async def claim_given_back(self: HandlerLimits) -> None:
        gate.events.append("claim given back")
        await release_claim(self)

    async def lease_given_back(self: DrainLease) -> None:
        gate.events.append("lease given back")
        await release_lease(self)

    async def quiet_recorded(self: Drainer) -> None:
        await record_quiet(self)
        received_all.set()

    monkeypatch.setattr(HandlerLimits, "release", claim_given_back)
    monkeypatch.setattr(DrainLease, "release", lease_given_back)
    monkeypatch.setattr(Drainer, "_record_quiet", quiet_recorded)
    drain = asyncio.ensure_future(drain_all(services))
    try:
        await asyncio.wait_for(received_all.wait(), WAIT_S)  # the failed extension gave the only chunk up
        assert lost, "the chunk's extension lost its answer"
        assert await leased(services)
    finally:
        gate.open.set()
    await asyncio.wait_for(drain, WAIT_S)
    assert gate.events == ["call returned", "claim given back", "lease given back"]


@pytest.mark.slow
async def test_no_chunk_takes_the_chunk_concurrency_place_of_a_sync_call_whose_chunk_was_given_up(
    configure: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same with no HANDLER_MAX_IN_FLIGHT: the call's place among CHUNK_CONCURRENCY (1 here, and the second
    chunk is of the same lane, so no extra place) stays taken until its thread returns, as a call's place does while
    it runs. Before, the next chunk's call started at once beside the running thread."""
    services = configure(
        publisher=RecordingPublisher(),
        HANDLER="tests.app.handlers:gated_sync",
        CHUNK_CONCURRENCY="1",
        VISIBILITY_TIMEOUT_S=str(VISIBILITY_S),
    )
    first, lost, began, decided = await first_call_blocked(services, monkeypatch)
    gate = handlers.gate
    acquire, hold, seen = FairSlots._acquire, fair_slots.hold_until, []
    given_up = asyncio.Event()  # the first chunk was given up, its thread left running

    async def observed(self: FairSlots, lane: str) -> None:
        seen.append(self)
        if self.free == 0 and given_up.is_set():  # no place free once the first chunk was given up: it waits
            decided.set()
        await acquire(self, lane)

    def kept(call: asyncio.Future[Any]) -> None:
        hold(call)
        given_up.set()
        if any(slots._waiting for slots in seen):  # the second chunk waits for a place already
            decided.set()

    monkeypatch.setattr(FairSlots, "_acquire", observed)
    monkeypatch.setattr(fair_slots, "hold_until", kept)
    drain = asyncio.ensure_future(drain_all(services))
    try:
        await asyncio.wait_for(began.wait(), WAIT_S)
        second = await submit_ids(services, ["b-1"])  # received once the failed extension gives the first chunk up
        await asyncio.wait_for(decided.wait(), WAIT_S)
        assert lost, "the first chunk's extension lost its answer"
        assert gate.started == [first], "a second call took the place of a running one under CHUNK_CONCURRENCY=1"
    finally:
        gate.open.set()
    await asyncio.wait_for(drain, WAIT_S)

    async def completed() -> bool:
        await drain_all(services)
        statuses = [(await read_batch_status(services, b))["status"] for b in (first, second)]
        return statuses == ["completed", "completed"]

    await wait_for(completed, WAIT_S, "both batches completed")
    assert gate.most == 1, "two handler calls in flight under CHUNK_CONCURRENCY=1"
