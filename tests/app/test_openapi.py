"""The published OpenAPI document is the committed file and describes every HTTP route the app registers."""

from __future__ import annotations

import json
from pathlib import Path

from queue_drain_client.errors import BY_CODE

from shared.core import errors
from tests.app.conftest import http_request

COMMITTED = Path(__file__).resolve().parents[2] / "shared" / "openapi.json"


async def test_the_served_document_is_the_committed_file(app_functions):
    response = await app_functions["openapi"](http_request("GET", "/api/openapi.json"))
    assert response.status_code == 200
    assert json.loads(response.get_body()) == json.loads(COMMITTED.read_text())


def test_every_registered_route_and_method_is_documented(indexed_functions):
    document = json.loads(COMMITTED.read_text())
    routes = set()
    for function in indexed_functions:
        trigger = function.get_trigger()
        if trigger.type == "httpTrigger":
            for method in trigger.methods:
                routes.add(("/" + trigger.route, str(getattr(method, "value", method)).lower()))
    documented = {(path, method) for path, ops in document["paths"].items() for method in ops}
    assert routes == documented


def test_the_error_code_enum_is_every_code_the_app_answers_and_the_client_has_a_class_for_each():
    def codes(cls: type) -> set[str]:
        return {cls.code} | {c for sub in cls.__subclasses__() for c in codes(sub)}

    answered = codes(errors.RequestError) | {"storage_unavailable", "storage_error", "internal"}  # shared.api's own
    document = json.loads(COMMITTED.read_text())
    assert (
        set(document["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"]["enum"]) == answered
    )
    assert answered <= set(BY_CODE), sorted(answered - set(BY_CODE))


def test_every_operation_has_a_tag_the_document_describes():
    document = json.loads(COMMITTED.read_text())
    described = {tag["name"] for tag in document["tags"]}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert operation.get("tags"), (method, path)
            assert set(operation["tags"]) <= described, (method, path)
