"""Every accepted batch is listed, and no chunk is handled before its batch is: a batch whose index write was lost after
its commit is listed once a drainer admits it, and a drainer that cannot index it leaves the chunk for redelivery (real
Azurite)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from azure.core.exceptions import ServiceRequestError
from azure.storage.blob.aio import BlobClient

from shared.store import batch_index
from tests.app.conftest import RecordingPublisher, another_instance, drain_all, http_request
from tests.app.listing import listed, sales, submit


class Died(BaseException):
    """The instance dies here: nothing after this point of its submit runs (no handler catches a BaseException)."""


def lose_index_writes(monkeypatch: pytest.MonkeyPatch, how: str, times: int = 1) -> list[str]:
    """The fault, injected at the storage boundary (the one fake here; the rest is the real stack on Azurite): the
    next `times` index writes fail, as storage refusing them (`storage fails`) or as the instance dying as it
    makes them (`instance dies`). Returns every index blob written since: names, in order, failed ones too."""
    written: list[str] = []
    upload = BlobClient.upload_blob

    async def upload_blob(self: BlobClient, data: Any, *args: Any, **kwargs: Any) -> Any:
        if self.blob_name.startswith(batch_index.PREFIX):
            written.append(self.blob_name)
            if len(written) <= times:
                if how == "instance dies":
                    raise Died()
                raise ServiceRequestError("connection reset (injected)")
        return await upload(self, data, *args, **kwargs)

    monkeypatch.setattr(BlobClient, "upload_blob", upload_blob)
    return written


@pytest.mark.parametrize("how", ["storage fails", "instance dies"])
async def test_a_batch_whose_index_write_was_lost_after_its_commit_is_listed_once_a_drainer_admits_it(
    configure, app_functions, monkeypatch, how
):
    # The simulation's seeds 81 and 96 (family submit): the manifest was committed (the batch is accepted and is
    # processed) but its index entry never written, and the client never retries; the list must still show it.
    services = configure(publisher=RecordingPublisher(), CHUNK_MAX_ITEMS="2")
    written = lose_index_writes(monkeypatch, how)
    body = sales("lost", 5)
    if how == "instance dies":
        with pytest.raises(Died):
            await app_functions["submit_batch"](
                http_request("POST", "/api/batches", body=body, headers={"Content-Type": "application/x-ndjson"})
            )
        services = another_instance(services)  # its memory is gone: another instance drains
    else:
        await submit(app_functions, body)
    batches = services.storage.container(services.settings.batches_container)
    [batch_id] = [b.name.split("/")[0] async for b in batches.list_blobs() if b.name.endswith("/manifest.json")]
    status = await app_functions["batch_status"](http_request("GET", "/api/batches/x", batch_id=batch_id))
    assert json.loads(status.get_body())["status"] == "accepted", "the commit landed: the batch is accepted"
    assert (await listed(app_functions))[1]["batches"] == [], "its index entry was lost"

    await drain_all(services)

    code, page = await listed(app_functions)
    assert code == 200
    assert [(b["batch_id"], b["status"], b["items"]["total"]) for b in page["batches"]] == [
        (batch_id, "completed", 5)
    ], "the drainer that admitted it by its manifest wrote its index entry"
    assert written[1:] == written[:1], "once, under the very name the submit would have written"


@pytest.mark.slow
async def test_a_chunk_whose_batch_the_drainer_could_not_index_is_left_for_redelivery_unhandled(
    configure, app_functions, monkeypatch
):
    # The submit's index write fails, then the drainer's: no chunk of the batch is handled before it is listed.
    from tests.app import handlers

    services = configure(publisher=RecordingPublisher(), HANDLER="tests.app.handlers:record", VISIBILITY_TIMEOUT_S="3")
    written = lose_index_writes(monkeypatch, "storage fails", times=2)
    accepted = await submit(app_functions, sales("late", 3))

    await drain_all(services)
    assert len(written) == 2, "the submit's write and the drainer's, both refused"
    assert not handlers.calls, "left for redelivery, as after a failed manifest read"
    assert (await listed(app_functions))[1]["batches"] == []

    await asyncio.sleep(3.5)  # its visibility timeout
    await drain_all(services)
    assert written[1:] == written[:1] * 2, "the same entry each time"
    assert sorted(handlers.calls.values()) == [1, 1, 1]
    _, page = await listed(app_functions)
    assert [(b["batch_id"], b["status"]) for b in page["batches"]] == [(accepted["batch_id"], "completed")]


async def test_a_drainer_writes_an_index_entry_only_for_a_batch_no_lane_mark_named(
    configure, app_functions, monkeypatch
):
    # A submit names its batch in its lanes' marks only once it is indexed; a drainer that takes a batch from a
    # mark writes nothing, one that admits it by its manifest writes the same entry again (idempotent): one PutBlob.
    services = configure(publisher=RecordingPublisher(), CHUNK_MAX_ITEMS="2")
    written = lose_index_writes(monkeypatch, "storage fails", times=0)
    first = await submit(app_functions, sales("one", 6))
    second = await submit(app_functions, sales("two", 6))  # its mark replaces the first's on their lane
    assert len(written) == 2, "the submits' own writes"

    await drain_all(another_instance(services))

    assert written[2:] == written[:1], "the first batch's entry again, once for its 3 chunks; none for the second"
    code, page = await listed(app_functions)
    assert code == 200
    assert [b["batch_id"] for b in page["batches"]] == [second["batch_id"], first["batch_id"]]
    assert all(b["status"] == "completed" for b in page["batches"])
