"""A submit whose own manifest writes land with their answers lost, on the real Azurite.

The storage SDK retries a write whose answer was lost (a reset connection) and meets what the first try wrote: a
create-only write then answers 409, a conditional one 412. Either is this request's own write when the stored
manifest names this request's attempt (an attempt id is one request's alone), not another request's: the
simulation saw an unkeyed submit take its own create for an earlier attempt, resume it, lose that write's answer
too, and answer `409 idempotency_conflict` "in progress" with no other request in flight (storage seed 3).
The loss is injected in the SDK's HTTP transport, after the real request reached Azurite.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from azure.core.exceptions import ServiceResponseError
from azure.core.pipeline.transport import AioHttpTransport

from shared.core.errors import StorageUnavailable
from shared.intake import submit
from tests.app.conftest import RecordingPublisher, drain_all, http_request

# Each waits out the SDK's retry back-off of the write whose answer it loses (seconds): `make test`, not test-fast.
pytestmark = pytest.mark.slow
MANIFEST = "/manifest.json"


def answers_lost(monkeypatch: Any, method: str, path_part: str, which: set[int]) -> list[str]:
    """The `method` requests to a URL containing `path_part` whose index (from 0, the SDK's own retries counted) is
    in `which` reach the service and then raise as a reset connection would, their answers never read. Answers
    the URLs whose answers were lost."""
    real = AioHttpTransport.send
    seen: list[str] = []
    lost: list[str] = []

    async def send(transport: AioHttpTransport, request: Any, **kwargs: Any) -> Any:
        response = await real(transport, request, **kwargs)
        if request.method == method and path_part in request.url:
            seen.append(request.url)
            if len(seen) - 1 in which:
                lost.append(request.url)
                await response.load_body()
                raise ServiceResponseError("connection reset after the request was sent (test)")
        return response

    monkeypatch.setattr(AioHttpTransport, "send", send)
    return lost


def body(count: int = 4) -> bytes:
    return "\n".join(json.dumps({"id": f"lost-{i}", "amount": "1.00"}) for i in range(count)).encode()


async def post(app_functions: Any, key: str | None = None) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/x-ndjson", **({"Idempotency-Key": key} if key else {})}
    response = await app_functions["submit_batch"](http_request("POST", "/api/batches", body=body(), headers=headers))
    return response.status_code, json.loads(response.get_body())


async def items_of(app_functions: Any, batch_id: str) -> dict[str, int]:
    response = await app_functions["batch_status"](http_request("GET", f"/api/batches/{batch_id}", batch_id=batch_id))
    items: dict[str, int] = json.loads(response.get_body())["items"]
    return items


async def test_a_submit_whose_manifest_writes_lost_their_answers_is_accepted_not_a_conflict(
    configure: Any, app_functions: Any, monkeypatch: Any
) -> None:
    services = configure(publisher=RecordingPublisher())
    # The create-only staging write (the SDK's retry meets it: 409), then the write after that 409.
    lost = answers_lost(monkeypatch, "PUT", MANIFEST, {0, 2})

    code, answer = await post(app_functions)

    assert len(lost) == 2, lost
    assert code == 202, answer
    await drain_all(services)
    items = await items_of(app_functions, answer["batch_id"])
    assert (items["total"], items["pending"]) == (4, 0), items


async def test_a_keyed_retry_whose_resuming_write_lost_its_answer_is_accepted_not_a_conflict(
    configure: Any, app_functions: Any, monkeypatch: Any
) -> None:
    services = configure(publisher=RecordingPublisher())
    store = submit.store

    async def refused(*args: Any) -> None:
        raise StorageUnavailable("store chunks", "refused (test)")

    monkeypatch.setattr(submit, "store", refused)
    code, first = await post(app_functions, key="k-lost")
    assert code == 503, first  # its manifest is left abandoned: the retry resumes it with a new attempt
    monkeypatch.setattr(submit, "store", store)
    lost = answers_lost(monkeypatch, "PUT", MANIFEST, {1})  # after the create-only write's 409: the resuming write

    code, answer = await post(app_functions, key="k-lost")

    assert len(lost) == 1, lost
    assert code == 202, answer
    await drain_all(services)
    items = await items_of(app_functions, answer["batch_id"])
    assert (items["total"], items["pending"]) == (4, 0), items
