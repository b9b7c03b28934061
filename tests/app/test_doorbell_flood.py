"""A flood's doorbells, delivered after the drain that took their work, cost nothing (issue 36 item 16), on the real
Azurite: N one-item submits for N tenants ring N doorbells; Service Bus hands the drain function one at a time
(`maxConcurrentCalls` 1), so the first drains the flood and the others come due after it, within a second or two
of its closing look. Each was a drain execution of its own (a lease, listings, the quiet record, a look: about
three storage transactions each, 5,826 in the first idle minute after 2,000 of them). A closing look that listed
a batch's lane mark and found nothing visible covers that batch's doorbell, whatever the clocks say."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from shared.core.events import Reason, TriggerEvent
from shared.ops.reports import read_batch_status
from shared.router import route
from shared.telemetry import metering
from tests.app.conftest import RecordingPublisher
from tests.app.tenants import submit_to

RECORD = "tests.app.handlers:record"
TENANTS = 30


def doorbells(services: Any) -> list[TriggerEvent]:
    return [e for e, _ in services.publisher.events if e.reason is Reason.SUBMITTED]


@pytest.mark.slow
async def test_a_floods_doorbells_delivered_after_its_drain_cost_no_storage_transaction(configure) -> None:
    services = configure(publisher=RecordingPublisher(), HANDLER=RECORD)
    batches = [await submit_to(services, f"f{i}", 1, tenant=f"tenant{i}") for i in range(TENANTS)]
    rung = doorbells(services)
    assert len(rung) == TENANTS, "one doorbell per one-item submit"

    first = await route(services, rung[0])  # the first doorbell's drain takes the whole flood
    assert first.items_ok == TENANTS

    with metering.tally() as idle:  # what the rest cost as they come due after it
        reports = [await route(services, event) for event in rung[1:]]
    outcomes = Counter(r.outcome for r in reports)
    assert outcomes == {"covered": TENANTS - 1}, outcomes
    assert sum(idle.values()) == 0, f"the flood's late doorbells made storage calls: {dict(idle)}"
    for batch_id in batches:
        assert (await read_batch_status(services, batch_id))["status"] == "completed"


async def test_a_doorbell_of_work_stored_after_the_closing_look_is_served(configure) -> None:
    """Nothing is left undrained: a submit after the look moves its lane's mark, and a scheduled batch's doorbell
    is not covered by a look that listed its mark while its chunks were hidden."""
    services = configure(publisher=RecordingPublisher(), HANDLER=RECORD)
    await submit_to(services, "a", 1, tenant="tenant0")
    [first] = doorbells(services)
    assert (await route(services, first)).items_ok == 1

    services.publisher.events.clear()
    later = await submit_to(services, "b", 2, tenant="tenant0")  # the same lane, after the look
    [again] = doorbells(services)
    report = await route(services, again)
    assert report.outcome != "covered"
    assert report.items_ok == 2, "work stored after the closing look is drained by its doorbell"
    assert (await read_batch_status(services, later))["status"] == "completed"

    # A doorbell rung for a not_before, whose mark the last look listed while its chunks were hidden.
    scheduled = TriggerEvent(
        again.account, again.queue, Reason.SUBMITTED, batch_id=again.batch_id, ready_ms=again.ready_ms,
        attempt=again.attempt, scheduled=True,
    )  # fmt: skip
    assert (again.queue, again.batch_id, again.attempt) in services.drained
    report = await route(services, scheduled)
    assert report.outcome != "covered", "a scheduled doorbell is covered only by a look after its start"
