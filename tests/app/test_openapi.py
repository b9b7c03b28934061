"""The published OpenAPI document is the committed file and describes every HTTP route the app registers."""

from __future__ import annotations

import json
from pathlib import Path

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
