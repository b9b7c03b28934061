"""A final batch with a callback gets its completion notice whatever dies when (issue 36 item 3): the app's real
functions on real Azurite with a real receiver; the fault is injected at the storage boundary (a storage error,
or the instance dying there), or the drain runs without the router's `finalize_all` after it (a host killed
between the last chunk's delete and that call). Nothing reads the batch's status (that would heal it): the
fallback timer alone must find the batch and store its notice, whose attempt then reaches the receiver."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from azure.core.exceptions import ServiceRequestError
from azure.functions.timer import TimerRequest
from azure.storage.blob.aio import BlobClient

from shared.core.events import Reason, TriggerEvent
from shared.ops import notices
from shared.router import route
from shared.services import Services
from tests.app.conftest import RecordingPublisher, another_instance, drain_all, http_request
from tests.receiver import Receiver, new_secret, receiving

SECRET = new_secret()


class Died(BaseException):
    """The instance dies here: nothing after this point runs (no handler catches a BaseException)."""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving(SECRET) as found:
        yield found


def with_callbacks(configure: Any, receiver: Receiver) -> Services:
    return configure(
        publisher=RecordingPublisher(),
        CHUNK_MAX_ITEMS="5",
        HANDLER="tests.app.handlers:record",
        CALLBACK_ALLOWED_HOSTS=f"http://127.0.0.1:{receiver.port}",
        CALLBACK_ALLOW_HTTP_LOOPBACK="true",
        CALLBACK_SECRET=SECRET,
    )


async def submit(app_functions: Any, receiver: Receiver, items: int) -> str:
    body = "\n".join(json.dumps({"id": f"s-{n}"}) for n in range(items)).encode()
    headers = {"Content-Type": "application/x-ndjson", "X-Callback-Url": receiver.url("/done")}
    response = await app_functions["submit_batch"](http_request("POST", "/api/batches", body=body, headers=headers))
    assert response.status_code == 202, response.get_body()
    batch_id: str = json.loads(response.get_body())["batch_id"]
    return batch_id


def fail_writes(monkeypatch: pytest.MonkeyPatch, prefix: str, raised: BaseException) -> list[str]:
    """From now on, the first write of a blob whose name starts with `prefix` raises `raised`; the names tried."""
    tried: list[str] = []
    upload = BlobClient.upload_blob

    async def upload_blob(self: BlobClient, data: Any, *args: Any, **kwargs: Any) -> Any:
        if self.blob_name.startswith(prefix):
            tried.append(self.blob_name)
            if len(tried) == 1:
                raise raised
        return await upload(self, data, *args, **kwargs)

    monkeypatch.setattr(BlobClient, "upload_blob", upload_blob)
    return tried


async def has_notice(services: Services, batch_id: str) -> bool:
    state = services.storage.container(services.settings.state_container)
    return bool(await state.get_blob_client(notices.notice_blob(batch_id)).exists())


@pytest.mark.parametrize("fault", ["killed before finalize", "killed between stamp and notice", "stamp fails"])
async def test_a_final_batch_gets_its_notice_from_the_timer_whatever_died_after_its_last_chunk(
    configure, app_functions, monkeypatch, receiver, fault
):
    services = with_callbacks(configure, receiver)
    batch_id = await submit(app_functions, receiver, 12)
    event = TriggerEvent(services.settings.account_name, services.settings.work_queue, Reason.SUBMITTED)
    if fault == "killed before finalize":
        await drain_all(services)  # the drain, and nothing after it: the host died before the router's finalize_all
    elif fault == "killed between stamp and notice":
        tried = fail_writes(monkeypatch, notices.PREFIX, Died())
        with pytest.raises(Died):
            await route(services, event)
        assert tried, "the instance died writing the notice"
    else:
        tried = fail_writes(monkeypatch, f"{batch_id}/manifest", ServiceRequestError("connection reset (injected)"))
        await route(services, event)  # finalize_all logs the storage error and goes on
        assert tried, "the stamp's write was refused"
    services = another_instance(services)
    # No notice without its stamp (issue 37): a refused stamp leaves none either, and the sweep stamps, then notices.
    assert not await has_notice(services, batch_id), "the fault left the final batch without a notice"

    await app_functions["fallback_poll"](TimerRequest(past_due=False))

    assert await has_notice(services, batch_id), "the timer stored the final batch's notice"
    notified = [e for e, _ in services.publisher.events if e.reason is Reason.NOTIFY and e.batch_id == batch_id]
    assert notified, "and published its attempt"
    await route(services, notified[-1])
    await services.storage.close()
    [got] = receiver.got
    assert got.verified
    assert got.json()["type"] == "batch.completed"
    assert got.json()["data"]["items"]["succeeded"] == 12
    assert receiver.count() == 1
