"""What the batch list's tests share: sales to submit, a submit and a list call through function_app's routes."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import azure.functions as func

from tests.app.conftest import http_request

ROOT = Path(__file__).resolve().parents[2]


def sales(token: str, count: int) -> bytes:
    return "\n".join(
        json.dumps({"id": f"{token}-{i}", "amount": "1.00", "currency": "EUR", "author": "a", "distributor": "d"})
        for i in range(count)
    ).encode()


async def submit(app_functions: Any, body: bytes, key: str | None = None) -> dict[str, Any]:
    headers = {"Content-Type": "application/x-ndjson", **({"Idempotency-Key": key} if key else {})}
    response = await app_functions["submit_batch"](http_request("POST", "/api/batches", body=body, headers=headers))
    assert response.status_code == 202, response.get_body()
    accepted: dict[str, Any] = json.loads(response.get_body())
    return accepted


async def listed(app_functions: Any, **params: str) -> tuple[int, Any]:
    request = func.HttpRequest("GET", "http://localhost:7071/api/batches", params=params, body=b"")
    response = await app_functions["batch_list"](request)
    return response.status_code, json.loads(response.get_body())


ACCEPTED = datetime(2026, 1, 1, tzinfo=timezone.utc)
