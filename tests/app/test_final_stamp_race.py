"""A cancel that races a batch becoming final (issue 37, the simulation's lifecycle seed 601): the cancel read
the batch before its last record and ended it after, while a status read (or a drainer's finalize) found it
final by its records and stored its notice. The batch's final status, its status route and its one completion
notice must say the same thing. Real Azurite, real receiver; the cancel's end (`lifecycle.end`, what `cancel`
does after a read that found the batch running) is run at the racing moment."""

from __future__ import annotations

import json
from typing import Any

from azure.storage.blob.aio import BlobClient

from shared.batch import lifecycle as ending
from shared.ops import lifecycle, notices
from shared.ops.status import batch_status
from tests.app.conftest import drain_all, http_request
from tests.app.test_notice_sweep import receiver, submit, with_callbacks  # noqa: F401 (receiver: a fixture)


async def test_a_cancel_ending_the_batch_while_it_is_finalized_never_contradicts_its_notice(
    configure,
    app_functions,
    monkeypatch,
    receiver,  # noqa: F811
):
    services = with_callbacks(configure, receiver)
    batch_id = await submit(app_functions, receiver, 3)
    await drain_all(services)  # every chunk recorded; not finalized yet
    upload = BlobClient.upload_blob
    raced: list[str] = []

    async def upload_blob(self: BlobClient, data: Any, *args: Any, **kwargs: Any) -> Any:
        if self.blob_name == notices.notice_blob(batch_id) and not raced:
            raced.append(self.blob_name)
            await lifecycle.end(services, batch_id, ending.CANCELLED)  # the cancel's end, read before the records
        return await upload(self, data, *args, **kwargs)

    monkeypatch.setattr(BlobClient, "upload_blob", upload_blob)
    await lifecycle.finalize(services, batch_id)
    assert raced, "the finalize wrote a notice"
    await lifecycle.finalize(services, batch_id)  # the cancel's own finalize, as `cancel` calls it
    await agree(services, batch_id)


async def test_a_status_read_of_a_batch_final_by_its_records_notices_nothing_a_cancel_then_overturns(
    configure,
    app_functions,
    receiver,  # noqa: F811
):
    services = with_callbacks(configure, receiver)
    batch_id = await submit(app_functions, receiver, 3)
    await drain_all(services)  # every chunk recorded; not finalized yet (the router's finalize_all not run)
    response = await app_functions["batch_status"](http_request("GET", "/api/batches/x", batch_id=batch_id))
    assert response.status_code == 200, response.get_body()
    assert json.loads(response.get_body())["status"] == "completed"
    await lifecycle.end(services, batch_id, ending.CANCELLED)  # a cancel whose read came before the last record
    await lifecycle.finalize(services, batch_id)  # its own finalize
    await agree(services, batch_id)


async def agree(services: Any, batch_id: str) -> None:
    """The stamp, the status route's rule and the stored notice say the same final status."""
    manifest, _, entries = await lifecycle.read(services, batch_id)
    notice, _ = await notices.read(services, batch_id)
    stated = json.loads(notice.body)["type"]
    assert manifest.final_status is not None, "the batch is stamped final"
    assert stated == f"batch.{manifest.final_status}", f"the notice says {stated}, the stamp {manifest.final_status}"
    status = batch_status(manifest, entries)["status"]
    assert status == manifest.final_status, f"the status route says {status}, the stamp {manifest.final_status}"
    await services.storage.close()
