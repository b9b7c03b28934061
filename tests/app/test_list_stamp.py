"""The batch list never contradicts a batch's final stamp (the simulation's stale cancel, lifecycle seed 601): a
cancel that read the batch before its last record and ended it after gets it stamped `cancelled`, while every
item has a record that succeeded. The status route says `cancelled`; the list, judging from the index entry and
the result listing, said `completed`. It says `ended` now, from the stamp in the index entry when the finalize
wrote it there, else from the manifest (read once, and the entry written again). Real Azurite."""

from __future__ import annotations

from typing import Any

from shared.batch import lifecycle as ending
from shared.core.errors import StorageUnavailable
from shared.ops import lifecycle
from shared.ops.reports import read_batch_status
from shared.store import batch_index
from shared.telemetry import metering
from tests.app.conftest import RecordingPublisher, drain_all
from tests.app.listing import listed, sales, submit


async def stale_cancel(configure: Any, app_functions: Any) -> tuple[Any, str]:
    """A batch every item of which succeeded, then ended by a cancel whose read came before its last record."""
    services = configure(publisher=RecordingPublisher(), CHUNK_MAX_ITEMS="2")
    batch_id: str = (await submit(app_functions, sales("stale", 5)))["batch_id"]
    await drain_all(services)  # every chunk recorded, all succeeded; not finalized yet
    await lifecycle.end(services, batch_id, ending.CANCELLED)
    return services, batch_id


async def shown(app_functions: Any, batch_id: str, **params: str) -> list[str]:
    code, page = await listed(app_functions, **params)
    assert code == 200, page
    return [b["status"] for b in page["batches"] if b["batch_id"] == batch_id]


async def stamps(services: Any, batch_id: str) -> list[str | None]:
    """The `final` of the batch's two index entries (every batch's, its tenant's)."""
    container = services.storage.container(services.settings.batches_container)
    return [
        blob.metadata.get("final")
        async for blob in container.list_blobs(name_starts_with="", include=["metadata"])
        if blob.name.startswith(("index/", "tindex/")) and blob.name.endswith(batch_id)
    ]


async def test_a_batch_stamped_cancelled_after_its_last_record_is_ended_in_the_list(configure, app_functions):
    services, batch_id = await stale_cancel(configure, app_functions)
    await lifecycle.finalize(services, batch_id)  # the cancel's own finalize: stamped `cancelled`
    status = await read_batch_status(services, batch_id)
    assert (status["status"], status["items"]["succeeded"]) == ("cancelled", 5), status
    assert await shown(app_functions, batch_id) == ["ended"], "the list agrees with the stamp"
    assert await stamps(services, batch_id) == ["cancelled", "cancelled"], "the stamp is in both index entries"
    with metering.tally() as spent:
        assert await shown(app_functions, batch_id) == ["ended"]
    assert dict(spent) == {"blob.ListBlobs": 2}, "one index listing, one results listing: no manifest read"
    assert await shown(app_functions, batch_id, status="completed") == []
    assert await shown(app_functions, batch_id, status="ended") == ["ended"]
    await services.storage.close()


async def test_the_list_reads_the_manifest_when_the_stamp_missed_the_index_and_writes_it(
    configure, app_functions, monkeypatch
):
    services, batch_id = await stale_cancel(configure, app_functions)
    assert await shown(app_functions, batch_id) == ["ended"], "ended after its last record, not yet stamped"
    write = batch_index.write

    async def unavailable(*args: object, **kwargs: object) -> None:
        raise StorageUnavailable("index batch", "injected outage")

    monkeypatch.setattr(batch_index, "write", unavailable)
    await lifecycle.finalize(services, batch_id)  # stamped, but its index entries not
    monkeypatch.setattr(batch_index, "write", write)
    assert await stamps(services, batch_id) == [None, None]
    with metering.tally() as spent:
        assert await shown(app_functions, batch_id) == ["ended"], "the manifest says so"
    assert (spent["blob.GetBlob"], spent["blob.PutBlob"]) == (1, 2), "a manifest read, both entries written"
    assert await stamps(services, batch_id) == ["cancelled", "cancelled"], "written again: read once"
    with metering.tally() as spent:
        assert await shown(app_functions, batch_id) == ["ended"]
    assert dict(spent) == {"blob.ListBlobs": 2}
    await services.storage.close()
