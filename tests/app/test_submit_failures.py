"""A submit that cannot store its batch (issue 12, defects 2 and 3), on the real Azurite.

Storage failing is injected at the queue client's send: after some chunks went in, the SDK call raises the
service's own 503 (`HttpResponseError`), which the app's boundary translates as it would a real one. A slow
storage is the same call delayed.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from azure.core.exceptions import HttpResponseError
from azure.storage.queue.aio import QueueClient

from shared import api
from shared.drain import Drainer
from shared.reports import read_batch_status
from tests.app.conftest import RecordingPublisher, queue_depth

ITEMS = [{"id": f"s-{i}", "amount": "1.00", "currency": "EUR", "author": "a", "distributor": "d"} for i in range(200)]
BODY = "\n".join(json.dumps(i) for i in ITEMS).encode()
HEADERS = {"content-type": "application/x-ndjson", "idempotency-key": "failing-submit"}


def sends_then(monkeypatch: Any, *, ok: int, then: str, delay_s: float = 0.0) -> list[int]:
    """The queue client's send: the first `ok` calls go through; then each fails (503) or is slow."""
    real = QueueClient.send_message
    count = [0]

    async def send_message(client: QueueClient, *args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        if count[0] > ok:
            if then == "503":
                error = HttpResponseError(message="Server Busy")
                error.status_code = 503
                raise error
            await asyncio.sleep(delay_s)
        return await real(client, *args, **kwargs)

    monkeypatch.setattr(QueueClient, "send_message", send_message)
    return count


async def test_storage_failing_under_a_submit_answers_503_and_the_batch_is_never_shown_accepted(configure, monkeypatch):
    services = configure(publisher=RecordingPublisher(), HANDLER="tests.app.handlers:record", CHUNK_MAX_ITEMS="10")
    sends_then(monkeypatch, ok=5, then="503")

    reply = await api.submit_batch(BODY, HEADERS)

    assert reply.status == 503, reply.body
    assert reply.headers["Retry-After"].isdigit()
    assert reply.body["error"]["code"] == "submit_not_stored"
    batch_id = reply.body["error"]["batch_id"]
    status = await read_batch_status(services, batch_id)
    assert status["status"] == "abandoned", "never 'accepted': it got no 202"
    monkeypatch.undo()  # storage is back
    work = services.storage.queue(services.settings.work_queue)
    assert await queue_depth(work) >= 1, "some chunks were stored before the failure"

    report = await Drainer(services, services.settings.work_queue).run()

    assert await queue_depth(work) == 0, "discarded at the first drain that met them, not after STAGING_TTL_S"
    assert report.items_ok == 0
    assert report.chunks_done == 0


async def test_a_submit_past_its_deadline_answers_503_in_time_and_nothing_of_it_counts(configure, monkeypatch):
    services = configure(publisher=RecordingPublisher(), CHUNK_MAX_ITEMS="1", SUBMIT_DEADLINE_S="1")
    sends_then(monkeypatch, ok=0, then="slow", delay_s=0.5)  # 200 chunks, 32 at a time: about 3 s

    started = time.monotonic()
    reply = await api.submit_batch(BODY, {"content-type": "application/x-ndjson"})
    answered_s = time.monotonic() - started

    assert reply.status == 503, reply.body
    assert "SUBMIT_DEADLINE_S" in reply.body["error"]["message"]
    assert answered_s < 2.5, "answered at the deadline, not when every send was done"
    status = await read_batch_status(services, reply.body["error"]["batch_id"])
    assert status["status"] == "abandoned"
