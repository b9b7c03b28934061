"""A batch's failure tolerance is judged where its state is judged (issue 36 item 7), on the real Azurite: when
the drainer that records the crossing cannot end the batch (a storage error there; a kill -9 has the same
effect), the batch must still end `failed`, never `completed_with_failures` with more failures than it
tolerates, in its status, its stamp and the batch list."""

from __future__ import annotations

import json

from shared.batch.lifecycle import Options
from shared.core import layout
from shared.core.errors import StorageUnavailable
from shared.core.events import Reason, TriggerEvent
from shared.engine import chunks
from shared.intake.submit import submit
from shared.ops.reports import read_batch_page, read_batch_status
from shared.router import route
from shared.store.storage import read_json
from tests.app.conftest import RecordingPublisher


async def test_a_batch_past_its_tolerance_ends_failed_though_its_drainer_could_not_end_it(configure, monkeypatch):
    services = configure(publisher=RecordingPublisher(), HANDLER="tests.app.handlers:mixed", CHUNK_MAX_ITEMS="10")
    items = [{"id": "perm-0"}, *({"id": f"ok-{n}"} for n in range(1, 30))]
    body = "\n".join(json.dumps(i) for i in items).encode()
    done = await submit(
        services, body, content_type="application/x-ndjson", content_encoding=None, idempotency_key=None,
        options=Options(max_failed_fraction=0.0),
    )  # fmt: skip
    batch_id = done.manifest.batch_id

    async def unavailable(*args: object, **kwargs: object) -> object:
        raise StorageUnavailable("list results: injected outage")

    # The drainer's own check of the tolerance (right after the failing chunk is deleted) meets a storage error.
    monkeypatch.setattr(chunks, "list_counted", unavailable)
    event = TriggerEvent(services.settings.account_name, services.settings.work_queue, Reason.SUBMITTED)
    await route(services, event)  # the drain, then finalize, as the drain function does

    status = await read_batch_status(services, batch_id)
    assert status["items"]["failed"] == 1, status
    assert status["status"] == "failed", "one failure where none is tolerated ends the batch failed"
    assert status["ended_by"] == "max_failed_fraction"
    doc, _ = await read_json(
        services.storage.container(services.settings.batches_container), layout.manifest_blob(batch_id)
    )
    assert doc.get("final_status") == "failed", "stamped failed, and its completion notice says so"
    assert doc.get("ended") == "failed", "ended in its manifest and by its marker: the rest of it is cancelled"
    listed = (await read_batch_page(services, 10, None))["batches"]
    assert [b["status"] for b in listed if b["batch_id"] == batch_id] == ["ended"], "the list agrees"
