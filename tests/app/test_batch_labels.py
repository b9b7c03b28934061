"""A batch's metadata (labels given at submit, returned by its status and the batch list) and the list's filters by
status, tenant and accepted time (issue 40 item 10), through the app's functions on real Azurite."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import azure.functions as func
import pytest

from tests.app.conftest import RecordingPublisher, drain_all, http_request

LABELS = {"order": "po-1234", "team": "billing", "note": "Grüße, 東京"}


def sales(token: str, count: int = 3) -> bytes:
    return "\n".join(
        json.dumps({"id": f"{token}-{i}", "amount": "1.00", "currency": "EUR", "author": "a", "distributor": "d"})
        for i in range(count)
    ).encode()


async def post(app_functions: Any, body: bytes, **headers: str) -> tuple[int, dict[str, Any]]:
    sent = {"Content-Type": "application/x-ndjson"} | {k.replace("_", "-"): v for k, v in headers.items()}
    response = await app_functions["submit_batch"](http_request("POST", "/api/batches", body=body, headers=sent))
    return response.status_code, json.loads(response.get_body())


async def status_of(app_functions: Any, batch_id: str) -> dict[str, Any]:
    response = await app_functions["batch_status"](http_request("GET", f"/api/batches/{batch_id}", batch_id=batch_id))
    found: dict[str, Any] = json.loads(response.get_body())
    return found


async def listed(app_functions: Any, **params: str) -> tuple[int, dict[str, Any]]:
    request = func.HttpRequest("GET", "http://localhost:7071/api/batches", params=params, body=b"")
    response = await app_functions["batch_list"](request)
    return response.status_code, json.loads(response.get_body())


async def test_labels_given_at_submit_come_back_in_the_answer_the_status_and_the_list(configure, app_functions):
    configure(publisher=RecordingPublisher())
    code, accepted = await post(app_functions, sales("m"), X_Metadata=json.dumps(LABELS))
    assert code == 202, accepted
    assert accepted["metadata"] == LABELS
    assert (await status_of(app_functions, accepted["batch_id"]))["metadata"] == LABELS
    _, page = await listed(app_functions)
    assert [b.get("metadata") for b in page["batches"]] == [LABELS]
    code, plain = await post(app_functions, sales("p"))
    assert "metadata" not in plain
    assert "metadata" not in await status_of(app_functions, plain["batch_id"])


@pytest.mark.parametrize(
    ("metadata", "code", "problem"),
    [
        ("not json", "malformed_request", "JSON object"),
        ('["a"]', "malformed_request", "JSON object"),
        (json.dumps({f"k{i}": "v" for i in range(17)}), "limit_exceeded", "16 pairs"),
        (json.dumps({"a b": "v"}), "malformed_request", "metadata key"),
        (json.dumps({"k" * 65: "v"}), "malformed_request", "metadata key"),
        (json.dumps({"k": 1}), "malformed_request", "strings"),
        (json.dumps({"k": "v" * 257}), "limit_exceeded", "256 characters"),
        ('{"k": "\\ud800"}', "malformed_request", "Unicode"),
    ],
)
async def test_metadata_beyond_its_bounds_is_a_json_400_naming_it_and_nothing_is_stored(
    configure, app_functions, metadata, code, problem
):
    configure(publisher=RecordingPublisher())
    status, body = await post(app_functions, sales("bad"), X_Metadata=metadata)
    assert status == 400, body
    assert body["error"]["code"] == code
    assert problem in body["error"]["message"]
    assert body["error"].get("field", "metadata") == "metadata"
    assert (await listed(app_functions))[1]["batches"] == []


async def test_a_key_reused_with_other_labels_is_a_409_naming_metadata(configure, app_functions):
    configure(publisher=RecordingPublisher())
    first = await post(app_functions, sales("k"), Idempotency_Key="k-1", X_Metadata=json.dumps({"a": "1"}))
    again = await post(app_functions, sales("k"), Idempotency_Key="k-1", X_Metadata=json.dumps({"a": "1"}))
    assert first[0] == again[0] == 202
    assert first[1]["batch_id"] == again[1]["batch_id"]
    code, changed = await post(app_functions, sales("k"), Idempotency_Key="k-1", X_Metadata=json.dumps({"a": "2"}))
    assert code == 409
    assert changed["error"]["different"] == ["metadata"]


async def test_the_list_filters_by_status_tenant_and_accepted_time(configure, app_functions):
    services = configure(publisher=RecordingPublisher())
    _, done = await post(app_functions, sales("d"), X_Tenant="acme")
    await drain_all(services)
    middle = datetime.now(timezone.utc)
    _, waiting = await post(app_functions, sales("w"), X_Tenant="globex")

    async def ids(**params: str) -> list[str]:
        code, page = await listed(app_functions, **params)
        assert code == 200, page
        return [b["batch_id"] for b in page["batches"]]

    assert await ids() == [waiting["batch_id"], done["batch_id"]]
    assert await ids(status="completed") == [done["batch_id"]]
    assert await ids(status="accepted") == [waiting["batch_id"]]
    assert await ids(tenant="acme") == [done["batch_id"]]
    assert await ids(tenant="globex", status="completed") == []
    assert await ids(since=middle.isoformat()) == [waiting["batch_id"]]
    assert await ids(until=middle.isoformat()) == [done["batch_id"]]
    later = (middle + timedelta(hours=1)).isoformat()
    assert await ids(since=later) == []
    for bad in ({"status": "done"}, {"since": "yesterday"}, {"until": "2030-01-01"}, {"tenant": "a b"}):
        code, body = await listed(app_functions, **bad)
        assert code == 400, body
        assert body["error"]["field"] == next(iter(bad))
