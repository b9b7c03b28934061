"""Storage transactions are counted inside the app, by operation, as Azure bills them (real Azurite)."""

from __future__ import annotations

from shared.intake.submit import submit
from shared.telemetry import metering
from tests.app.conftest import RecordingPublisher, drain_all

SALES = b"".join(
    b'{"id":"m-%d","amount":"1.00","currency":"EUR","author":"a","distributor":"d"}\n' % i for i in range(1000)
)


async def test_submit_and_drain_of_a_thousand_items_cost_a_few_transactions_each_counted(configure):
    services = configure(publisher=RecordingPublisher(), CHUNK_MAX_ITEMS="500")
    await services.storage.ensure_container(services.settings.batches_container)
    await services.storage.ensure_queue(services.settings.work_queue)
    await services.storage.ensure_container(services.settings.state_container)
    with metering.tally() as submitted:
        await submit(services, SALES, content_type="application/x-ndjson", content_encoding=None, idempotency_key=None)
    report = await drain_all(services)

    # The manifest (staging, accepted), the batch's two index entries (every batch's index, its tenant's), 2
    # chunks, the mark on their lane (before the chunks are stored, so no drainer takes the lane for quiet, and
    # after the commit, naming the batch), and the look chain: read, and armed (written) since no look was armed
    # on this idle queue.
    assert dict(submitted) == {
        "blob.PutBlob": 5,
        "blob.GetBlob": 1,
        "queue.PutMessage": 2,
        "queue.SetQueueMetadata": 2,
    }
    drained = report.transactions
    assert drained["queue.ListQueues"] == 2  # the lanes, as the session starts and once more after it
    assert drained["queue.DeleteMessage"] == 2
    assert drained["blob.PutBlob"] >= 2  # one result per chunk (+ the lease blob on first use)
    assert drained["queue.GetMessages"] == 2  # one page with both chunks, one empty page
    assert report.transaction_total < 20
    totals = services.counter.totals()
    assert totals["queue.PutMessage"] >= 2
    assert totals["queue.DeleteMessage"] >= 2
