"""With function keys configured, every function-level route refuses a request without a valid key (401),
before the app sees it; the OpenAPI document stays anonymous."""

from __future__ import annotations

import json

import pytest

from shared.api import OPENAPI
from tests.hostile.cases import JSON, VALID
from tests.hostile.conftest import HOST_KEY, MASTER_KEY, SUBMIT_KEY, HostileStack

pytestmark = pytest.mark.hostile

# (method, path, body, headers): the routes that change state, then the function-level reads.
GUARDED = [
    ("POST", "/api/batches", VALID, JSON),
    ("POST", "/api/poison/replay", b"{}", JSON),
    ("GET", "/api/poison", None, {}),
    ("GET", "/api/poison/0f0f0f0f-1111-2222-3333-444455556666", None, {}),
    ("GET", f"/api/batches/{'0' * 32}", None, {}),
    ("GET", "/api/queues", None, {}),
    ("GET", "/api/batches", None, {}),
    ("GET", "/api/dashboard", None, {}),
]
WRONG = [None, "", "wrong", HOST_KEY + "x", HOST_KEY[:-1], HOST_KEY.upper()]


@pytest.mark.parametrize(("method", "path", "body", "headers"), GUARDED)
def test_a_function_route_refuses_a_missing_or_wrong_key_with_401(
    hostile: HostileStack, method: str, path: str, body: bytes | None, headers: dict[str, str]
) -> None:
    hostile.wait_drained()
    depth, blobs = hostile.work_depth(), hostile.batch_blobs()
    for key in WRONG:
        reply = hostile.request(method, path, body, headers, key=key)
        assert (reply.status, reply.body) == (401, b""), (key, reply.status, reply.body[:200])
        wrong_query = hostile.request(method, f"{path}?code={key or 'nothing'}", body, headers, key=None)
        assert wrong_query.status == 401, (key, wrong_query.status)
    if (method, path) != ("POST", "/api/batches"):
        refused = hostile.request(method, path, body, headers, key=SUBMIT_KEY)
        assert refused.status == 401, "a function key opens its own function only"
    assert hostile.work_depth() == depth == hostile.scheduled_chunks(), "a refused request enqueued a chunk"
    assert hostile.batch_blobs() == blobs, "a refused request stored something"


@pytest.mark.parametrize(("method", "path", "body", "headers"), GUARDED)
def test_host_and_master_keys_open_a_function_route_in_the_header_or_the_query(
    hostile: HostileStack, method: str, path: str, body: bytes | None, headers: dict[str, str]
) -> None:
    for key in (HOST_KEY, MASTER_KEY):
        assert hostile.request(method, path, body, headers, key=key).status != 401
        assert hostile.request(method, f"{path}?code={key}", body, headers, key=None).status != 401


def test_a_function_key_opens_its_own_function(hostile: HostileStack) -> None:
    reply = hostile.request("POST", "/api/batches", VALID, JSON, key=SUBMIT_KEY)
    assert reply.status == 202, reply.body[:200]
    hostile.wait_drained()


def test_the_openapi_document_is_served_without_a_key_and_is_the_committed_file(hostile: HostileStack) -> None:
    reply = hostile.request("GET", "/api/openapi.json", key=None)
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("application/json")
    assert reply.json() == json.loads(OPENAPI.read_text())
