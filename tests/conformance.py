"""Every answer of the app that the suite sees, held to the OpenAPI document (shared/openapi.json).

A pytest plugin (tests/conftest.py loads it): the test clients' answers are checked as they arrive: httpx's
(the client package, the README's quickstart), aiohttp's (the host tests) and the app's functions called directly
(tests/app). An answer from an `/api/...` route the document describes must have a status code the operation
documents and a body its schema for that code accepts (schemathesis's response check); a test that saw one that
does not fails at its teardown, naming it. Routes the document does not describe (the local host's test apps) and
the documents themselves (dashboard, openapi.json) are not checked; NDJSON answers are checked for their status
and content type. `conformance.CHECKED` counts what was checked, per operation and status.
"""

from __future__ import annotations

import datetime
import functools
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import httpx
import pytest
import schemathesis

from shared.api import OPENAPI

SCHEMA = schemathesis.openapi.from_path(OPENAPI)
NOT_CHECKED = {"/openapi.json", "/dashboard"}
APP_HOSTS = {"127.0.0.1", "localhost"}  # the app, local (a scripted transport's host, e.g. app.test, is not it)
VIOLATIONS: list[str] = []
CHECKED: Counter[str] = Counter()


def problem(method: str, url: str, status: int, headers: Mapping[str, str], body: bytes) -> str | None:
    """What is wrong with this answer by the document, or None (also for what the document does not describe)."""
    parts = urlsplit(url)
    path = parts.path
    if parts.hostname not in APP_HOSTS or not path.startswith("/api/") or path[4:] in NOT_CHECKED:
        return None
    route = path[4:]
    try:
        operation = SCHEMA.find_operation_by_path(method.upper(), route)
    except Exception:  # schemathesis raises its own for a path it does not know
        operation = None
    if operation is None:
        return None
    label = f"{method.upper()} {route} -> {status}"
    CHECKED[f"{operation.label} {status}"] += 1
    documented = operation.definition.raw.get("responses", {})
    if str(status) not in documented and "default" not in documented:
        return f"{label}: status {status} is not documented for {operation.label} ({sorted(documented)})"
    response = httpx.Response(status, headers=dict(headers), content=body, request=httpx.Request(method, url))
    response.elapsed = datetime.timedelta(0)
    try:
        operation.validate_response(response)
    except Exception as e:  # schemathesis's FailureGroup and its kin: the message is the point
        return f"{label}: {str(e).strip()[:1500]}"
    return None


def record(method: str, url: str, status: int, headers: Mapping[str, str], body: bytes) -> None:
    found = problem(method, url, status, headers, body)
    if found is not None:
        VIOLATIONS.append(found)


def httpx_send(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def send(self: httpx.Client, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        response: httpx.Response = original(self, request, **kwargs)
        if not kwargs.get("stream"):
            record(request.method, str(request.url), response.status_code, response.headers, response.content)
        return response

    return send


def httpx_async_send(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def send(self: httpx.AsyncClient, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        response: httpx.Response = await original(self, request, **kwargs)
        if not kwargs.get("stream"):
            record(request.method, str(request.url), response.status_code, response.headers, response.content)
        return response

    return send


def aiohttp_request(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def request(self: aiohttp.ClientSession, method: str, url: Any, **kwargs: Any) -> aiohttp.ClientResponse:
        response: aiohttp.ClientResponse = await original(self, method, url, **kwargs)
        if urlsplit(str(response.url)).path.startswith("/api/"):
            body = await response.read()  # kept by the response: the test reads it again
            record(method, str(response.url), response.status, response.headers, body)
        return response

    return request


def function_checked(function: Callable[..., Any]) -> Callable[..., Any]:
    """An app function (tests/app calls them directly) whose answers are checked."""

    @functools.wraps(function)
    async def call(request: Any, *args: Any, **kwargs: Any) -> Any:
        response = await function(request, *args, **kwargs)
        if hasattr(response, "status_code") and hasattr(request, "url"):
            headers = {"content-type": response.mimetype} | dict(response.headers)  # the host sends mimetype so
            record(request.method, request.url, response.status_code, headers, response.get_body())
        return response

    return call


@pytest.fixture(scope="session", autouse=True)
def answers_checked() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(httpx.Client, "send", httpx_send(httpx.Client.send))
        patch.setattr(httpx.AsyncClient, "send", httpx_async_send(httpx.AsyncClient.send))
        patch.setattr(aiohttp.ClientSession, "_request", aiohttp_request(aiohttp.ClientSession._request))
        yield


@pytest.fixture(autouse=True)
def answers_conform() -> Iterator[None]:
    """Fails the test (at teardown) that saw an answer the OpenAPI document does not allow."""
    VIOLATIONS.clear()
    yield
    found = list(VIOLATIONS)
    VIOLATIONS.clear()
    assert not found, "answers that shared/openapi.json does not allow:\n" + "\n".join(found)
