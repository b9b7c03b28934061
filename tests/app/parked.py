"""Batches with parked chunks for the replay tests (real Azurite): the sales that park, a batch parked while it is still
processing or once final, and the calls the tests make to function_app's routes."""

from __future__ import annotations

import json
from typing import Any

from shared.intake.submit import submit
from shared.ops.reports import read_batch_status
from tests.app.conftest import RecordingPublisher, drain_all, http_request
from tests.app.held import Held, hold_first_chunk

SALES = "\n".join(
    json.dumps({"id": f"r-{i}", "amount": "2.50", "currency": "EUR", "author": "a", "distributor": "d"})
    for i in range(30)
).encode()

# Ten sales that never fail, before the 30: the chunk a test holds back (`parked_while_processing`).
LEAD = "\n".join(
    json.dumps({"id": f"lead-{i}-x", "amount": "1.00", "currency": "EUR", "author": "a", "distributor": "d"})
    for i in range(10)
).encode()


def parking(configure: Any, *, chunk_max_items: int = 10, publisher: RecordingPublisher | None = None) -> Any:
    """The app's services for a test of parked chunks: the handler fails r-7, r-17 and r-27 (`fail_sevens`), and
    with one attempt each (MAX_DEQUEUE_COUNT 1) their chunks are parked at once; chunks of `chunk_max_items` sales;
    events go to `publisher` (a new recording one by default)."""
    return configure(
        publisher=RecordingPublisher() if publisher is None else publisher,
        HANDLER="tests.app.handlers:fail_sevens",
        MAX_DEQUEUE_COUNT="1",
        CHUNK_MAX_ITEMS=str(chunk_max_items),
    )


async def call(app_functions: Any, name: str, request: Any) -> tuple[int, Any]:
    response = await app_functions[name](request)
    return response.status_code, json.loads(response.get_body())


async def parked_while_processing(services: Any) -> tuple[str, Held]:
    """Submit the ten lead sales and the 30, hold the first chunk (of lead sales, with CHUNK_MAX_ITEMS at most 10)
    and drain the rest: with the test's failing handler, r-7, r-17 and r-27 are parked while the batch is still
    `processing`. Answers the batch id and the held chunk."""
    done = await submit(
        services, LEAD + b"\n" + SALES, content_type="application/x-ndjson", content_encoding=None,
        idempotency_key=None,
    )  # fmt: skip
    held = await hold_first_chunk(services)
    await drain_all(services)
    assert (await read_batch_status(services, done.manifest.batch_id))["status"] == "processing"
    return str(done.manifest.batch_id), held


HELD: dict[str, Held] = {}


async def parked(services: Any) -> str:
    """`parked_while_processing`, answering the batch id (its held chunk is `HELD[batch_id]`)."""
    batch_id, HELD[batch_id] = await parked_while_processing(services)
    return batch_id


async def finish(services: Any, batch_id: str) -> dict[str, Any]:
    """Release the batch's held chunk, drain, and answer its status."""
    await HELD.pop(batch_id).release()
    await drain_all(services)
    return await read_batch_status(services, batch_id)


async def post_replay(app_functions: Any, doc: dict[str, Any]) -> tuple[int, Any]:
    body = json.dumps(doc).encode()
    return await call(app_functions, "poison_replay", http_request("POST", "/api/poison/replay", body=body))


async def final_with_parked(services: Any) -> str:
    """The 30 sales, drained: r-7, r-17 and r-27 parked and the batch final (`completed_with_failures`)."""
    done = await submit(
        services, SALES, content_type="application/x-ndjson", content_encoding=None, idempotency_key=None
    )
    await drain_all(services)
    return str(done.manifest.batch_id)
