"""Bad input gets a clear 4xx JSON error naming the problem, and nothing is stored.

Every request goes through function_app.py's registered `submit_batch` function with a real
func.HttpRequest, against the real Azurite.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from azure.core.exceptions import ResourceNotFoundError

from tests.app.conftest import http_request

SALE = {"id": "s-1", "amount": "9.99", "currency": "EUR", "author": "a", "distributor": "d"}


async def post(app_functions: Any, body: bytes, content_type: str | None = "application/json", **headers: str) -> Any:
    all_headers = dict(headers)
    if content_type is not None:
        all_headers["Content-Type"] = content_type
    response = await app_functions["submit_batch"](http_request("POST", "/api/batches", body=body, headers=all_headers))
    return response.status_code, json.loads(response.get_body())


async def assert_nothing_stored(services: Any) -> None:
    settings = services.settings
    queue = services.storage.queue(settings.work_queue)
    try:
        depth = (await queue.get_queue_properties()).approximate_message_count
    except ResourceNotFoundError:
        depth = 0
    assert depth == 0, "a refused batch must not enqueue anything"
    try:
        blobs = [b.name async for b in services.storage.container(settings.batches_container).list_blobs()]
    except ResourceNotFoundError:
        blobs = []
    assert blobs == [], "a refused batch must not leave a manifest or claim check"


def items_body(n: int, item: Any = None) -> bytes:
    return json.dumps({"items": [item if item is not None else {**SALE, "id": f"s-{i}"} for i in range(n)]}).encode()


@pytest.mark.parametrize(
    ("setting", "value", "body", "headers", "status"),
    [
        ("MAX_ITEMS", "10", items_body(11), {}, 413),
        ("MAX_BODY_BYTES", "2048", items_body(40), {}, 413),
        ("MAX_ITEM_BYTES", "100", items_body(1, {"id": "x", "pad": "y" * 200}), {}, 413),
        ("MAX_JSON_DEPTH", "4", json.dumps({"items": [[[[[[1]]]]]]}).encode(), {}, 400),
        ("MAX_GZIP_RATIO", "10", gzip.compress(json.dumps({"items": ["a" * 2_000_000]}).encode(), mtime=0),
         {"Content-Encoding": "gzip"}, 413),
        ("MAX_BODY_BYTES", "100000", gzip.compress(b'{"items":["' + b"a" * 5_000_000 + b'"]}', mtime=0),
         {"Content-Encoding": "gzip"}, 413),
    ],
    ids=["items", "body-bytes", "item-bytes", "json-depth", "gzip-ratio", "gzip-bomb-body-bytes"],
)  # fmt: skip
async def test_each_limit_is_refused_by_name_and_nothing_is_enqueued(
    configure, app_functions, setting, value, body, headers, status
):
    services = configure(
        **{setting: value, "MAX_ITEM_BYTES": "4000000"} if setting != "MAX_ITEM_BYTES" else {setting: value}
    )
    code, answer = await post(app_functions, body, **headers)
    assert code == status, answer
    assert answer["error"]["code"] == "limit_exceeded"
    assert answer["error"]["limit"] == setting
    assert setting in answer["error"]["message"]
    await assert_nothing_stored(services)


@pytest.mark.parametrize(
    ("body", "content_type", "headers", "status", "code", "says"),
    [
        (b"{not json", "application/json", {}, 400, "malformed_request", "not valid JSON"),
        (b'{"items": "abc"}', "application/json", {}, 400, "malformed_request", "must be an array"),
        (b'{"things": []}', "application/json", {}, 400, "malformed_request", '"items"'),
        (b'{"items": [1], "extra": 2}', "application/json", {}, 400, "malformed_request", "unknown top-level"),
        (b'{"items": []}', "application/json", {}, 400, "malformed_request", "no items"),
        (b"", "application/json", {}, 400, "malformed_request", "JSON"),
        (b'{"items": [NaN]}', "application/json", {}, 400, "malformed_request", "cannot carry"),
        (b'{"a":1}\n{"b":\n', "application/x-ndjson", {}, 400, "malformed_request", "line 2"),
        (b"\n\n", "application/x-ndjson", {}, 400, "malformed_request", "no items"),
        (b'{"items": ["\xff\xfe"]}', "application/json", {}, 400, "malformed_request", "UTF-8"),
        (b'{"items": [1]}', "text/plain", {}, 415, "unsupported_media_type", "Content-Type"),
        (b'{"items": [1]}', None, {}, 415, "unsupported_media_type", "missing"),
        (b'{"items": [1]}', "application/json", {"Content-Encoding": "br"}, 415, "unsupported_media_type", "br"),
        (b"not gzip", "application/json", {"Content-Encoding": "gzip"}, 400, "malformed_request", "gzip"),
        (gzip.compress(b'{"items":[1]}', mtime=0)[:-6], "application/json", {"Content-Encoding": "gzip"}, 400,
         "malformed_request", "truncated"),
        (gzip.compress(b'{"items":[1]}', mtime=0) + b"junk", "application/json", {"Content-Encoding": "gzip"}, 400,
         "malformed_request", "gzip"),
        (b'{"items": [1]}', "application/json", {"Idempotency-Key": "\x01bad"}, 400, "malformed_request",
         "Idempotency-Key"),
    ],
)  # fmt: skip
async def test_malformed_requests_are_refused_with_a_json_error_and_nothing_is_enqueued(
    configure, app_functions, body, content_type, headers, status, code, says
):
    services = configure()
    got, answer = await post(app_functions, body, content_type, **headers)
    assert got == status, answer
    assert answer["error"]["code"] == code
    assert says in answer["error"]["message"]
    await assert_nothing_stored(services)


async def test_an_ndjson_batch_with_a_deep_line_names_the_line_and_the_limit(configure, app_functions):
    services = configure(MAX_JSON_DEPTH="3")
    body = b'{"id":1}\n{"id":2}\n[[[[{"id":3}]]]]\n'
    code, answer = await post(app_functions, body, "application/x-ndjson")
    assert code == 400
    assert answer["error"]["limit"] == "MAX_JSON_DEPTH"
    assert "line 3" in answer["error"]["message"]
    await assert_nothing_stored(services)


async def test_brackets_inside_strings_do_not_count_as_nesting(configure, app_functions):
    configure(MAX_JSON_DEPTH="3")
    body = json.dumps({"items": [{"id": "[[[[[[{{{{{{", "note": '\\"[[[['}]}).encode()
    code, answer = await post(app_functions, body)
    assert code == 202, answer
