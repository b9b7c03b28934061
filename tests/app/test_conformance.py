"""The OpenAPI check every test runs under (tests/conformance.py) refuses what the document does not allow."""

from __future__ import annotations

import json

from tests.conformance import problem

URL = "http://127.0.0.1:7071/api/batches/" + "a" * 32
JSON = {"content-type": "application/json"}


def body(doc: object) -> bytes:
    return json.dumps(doc).encode()


def test_an_answer_the_document_allows_passes_and_others_are_named() -> None:
    missing = {"error": {"code": "not_found", "message": "no batch"}}
    assert problem("GET", URL, 404, JSON, body(missing)) is None
    unknown_code = {"error": {"code": "made_up", "message": "x"}}
    assert "made_up" in (problem("GET", URL, 404, JSON, body(unknown_code)) or "")
    assert "not documented" in (problem("GET", URL, 418, JSON, body(missing)) or "")
    assert "required" in (problem("GET", URL, 200, JSON, body({"batch_id": "a" * 32})) or "")


def test_what_the_document_does_not_describe_is_not_checked() -> None:
    assert problem("GET", "http://127.0.0.1:7071/api/hello", 200, JSON, b"{}") is None  # a test app's route
    assert problem("GET", "http://app.test/api/batches/x", 502, {}, b"") is None  # a scripted front end
    assert problem("GET", "http://127.0.0.1:10000/devstoreaccount1/x", 200, {}, b"") is None  # Azurite
