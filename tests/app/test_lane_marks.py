"""A lane's mark and a doorbell name the batch and the attempt its submit committed, so a drainer takes a batch no mark
names, or a marked one, without reading its manifest, and another attempt costs one manifest read, never the batch's
chunks (real Azurite)."""

from __future__ import annotations

from shared.core import lanes
from shared.ops.reports import read_batch_status
from tests.app.conftest import RecordingPublisher
from tests.app.tenants import RECORD, submit_to


def test_a_mark_names_the_batch_and_attempt_its_submit_committed_and_nothing_else() -> None:
    assert lanes.committed_in(lanes.mark_text(1_700_000_000_000, "ab12cd34", ("f" * 32, "0a1b2c3d4e5f"))) == (
        "f" * 32,
        "0a1b2c3d4e5f",
        1_700_000_000_000,
    )
    assert lanes.committed_in(lanes.mark_text(1_700_000_000_000, "ab12cd34")) is None  # a replay's mark
    assert lanes.committed_in(None) is None
    assert lanes.committed_in("1-2-batch id-x") is None, "only what a submit writes"


async def test_a_doorbell_names_its_committed_attempt_so_a_batch_no_mark_names_needs_no_manifest_read(
    configure,
) -> None:
    """A tenant's submits overlap: its lane's mark names only the latest batch, and the drainer read the others'
    manifests (and wrote their index entries) before their first handler call: hundreds of ms behind a deep
    backlog (BENCHMARKS.md, fairness). Each doorbell names the attempt its submit committed and indexed."""
    from shared.core.events import TriggerEvent
    from shared.engine.serve import serve
    from shared.store.ended import read_manifest
    from tests.app.conftest import another_instance

    publisher = RecordingPublisher()
    services = configure(publisher=publisher, HANDLER=RECORD)
    first = await submit_to(services, "m", 3, tenant="acme")
    await submit_to(services, "n", 3, tenant="acme")  # the lane's mark now names this one only
    doorbell = next(event for event, _ in publisher.events if event.batch_id == first)
    container = services.storage.container(services.settings.batches_container)
    assert doorbell.attempt == (await read_manifest(container, first))[0].attempt
    fresh = another_instance(services)  # a drainer process that has read no manifest
    try:
        report = await serve(fresh, TriggerEvent.decode(doorbell.encode()))  # as Service Bus delivers it
    finally:
        await fresh.storage.close()

    assert report.items_ok == 6
    # One read: the partition's quiet record; neither batch's manifest (and so no index entry written again).
    assert report.transactions.get("blob.GetBlob", 0) == 1, report.transactions
    assert (await read_batch_status(services, first))["status"] == "completed"


async def test_a_doorbell_that_names_another_attempt_costs_a_manifest_read_never_the_batch_s_chunks(configure) -> None:
    """Service Bus is not where a batch's state lives: a doorbell naming an attempt that is not the committed one
    (a forged or corrupted event) must not make the drainer drop the batch's chunks as a replaced attempt's."""
    from dataclasses import replace

    from shared.core.events import TriggerEvent
    from shared.engine.serve import serve
    from tests.app.conftest import another_instance

    publisher = RecordingPublisher()
    services = configure(publisher=publisher, HANDLER=RECORD)
    batch_id = await submit_to(services, "w", 3, tenant="acme")
    await submit_to(services, "x", 3, tenant="acme")  # the lane's mark names this one: the first is the doorbell's
    doorbell = next(event for event, _ in publisher.events if event.batch_id == batch_id)
    wrong = replace(doorbell, attempt="0bad0bad0bad")
    fresh = another_instance(services)
    try:
        report = await serve(fresh, TriggerEvent.decode(wrong.encode()))
    finally:
        await fresh.storage.close()

    assert (report.items_ok, report.stale) == (6, 0), report
    assert report.transactions.get("blob.GetBlob", 0) == 2, "the quiet record, and the first batch's manifest"
    assert (await read_batch_status(services, batch_id))["status"] == "completed"


async def test_a_drainer_takes_a_marked_batch_as_committed_without_reading_its_manifest(configure) -> None:
    """A new tenant's first chunk waits for no manifest read: the listing that found its lane carried it."""
    from tests.app.conftest import another_instance, drain_all

    services = configure(publisher=RecordingPublisher(), HANDLER=RECORD)
    batch_id = await submit_to(services, "m", 3, tenant="acme")
    fresh = another_instance(services)  # a drainer process that has read no manifest
    try:
        report = await drain_all(fresh)
    finally:
        await fresh.storage.close()

    assert report.items_ok == 3
    # One read: the partition's quiet record (`shared.engine.lane_queues`), not the batch's manifest.
    assert report.transactions.get("blob.GetBlob", 0) == 1, report.transactions
    assert (await read_batch_status(services, batch_id))["status"] == "completed"
