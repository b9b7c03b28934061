"""A submit answered 202 while storage refused its look chain's write, on the real Azurite.

The doorbell went to Service Bus, but the look chain is the net for a doorbell lost after it was sent (dead-lettered,
or taken by an instance that died): the simulation's storage seed 110 had storage answer 5xx for 19 s while a
submit arms its queue's chain, Service Bus lose the doorbell, and the queue holding the batch go unlooked-at until the
timer's tick (6 hours in production), the submit having left the chain to the timer. This process must arm the chain
once storage answers. The fault is injected at the storage boundary (the look blob's writes raise as a reset
connection would); the rest is the real stack.
"""

from __future__ import annotations

from typing import Any

import pytest
from azure.core.exceptions import ServiceRequestError
from azure.storage.blob.aio import BlobClient

from shared.core import layout
from tests.app.conftest import RecordingPublisher, wait_for
from tests.app.test_lookout import looks
from tests.app.test_lost_look_answer import assert_armed_by_a_live_look
from tests.app.test_submit_lost_answers import post


def look_writes_fail(monkeypatch: pytest.MonkeyPatch, queue: str) -> tuple[list[str], list[bool]]:
    """Every write of `queue`'s look blob fails while the returned switch is on. Answers the failed writes' names
    and the switch (a one-element list: clear it to let storage answer again)."""
    failed: list[str] = []
    down = [True]
    upload = BlobClient.upload_blob

    async def upload_blob(self: BlobClient, data: Any, *args: Any, **kwargs: Any) -> Any:
        if down and self.blob_name == layout.look_blob(queue):
            failed.append(self.blob_name)
            raise ServiceRequestError("storage did not answer (injected)")
        return await upload(self, data, *args, **kwargs)

    monkeypatch.setattr(BlobClient, "upload_blob", upload_blob)
    return failed, down


@pytest.mark.slow
async def test_a_look_chain_storage_would_not_arm_at_a_submit_is_armed_once_storage_answers(
    configure: Any, app_functions: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = configure(publisher=RecordingPublisher(), BACKOFF_FLOOR_MS="10000", BACKOFF_JITTER="0")
    queue = services.settings.work_queue
    failed, down = look_writes_fail(monkeypatch, queue)

    code, answer = await post(app_functions)

    assert code == 202, answer
    assert failed, "the chain's write failed"
    assert [e.reason.value for e, _ in services.publisher.events if e.batch_id] == ["submitted"], "the doorbell rang"
    assert services.deferred.pending() == [queue], "this process tries the chain again, not the timer's next tick"

    async def retried() -> bool:
        return len(failed) > 1

    async def armed() -> bool:
        return not services.deferred.pending()

    await wait_for(retried, 60, "the first retry (FIRST_RETRY_S after the submit), storage still down")
    assert services.deferred.pending() == [queue], "a retry storage refused is tried again"
    down.clear()  # storage answers again
    await wait_for(armed, 60, "the next retry (twice the delay later)")

    assert services.deferred.pending() == []
    await assert_armed_by_a_live_look(services)
    assert [e.queue for e, _ in looks(services.publisher)][-1] == queue
