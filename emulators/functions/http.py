"""HTTP triggers on an aiohttp server: routing under the route prefix, HttpRequest in, HttpResponse out."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import azure.functions as func
from aiohttp import web
from multidict import MultiMapping

from emulators.functions.easyauth import UNPROTECTED, EasyAuth, InvalidToken, unauthorized_body
from emulators.functions.indexing import FunctionSpec
from emulators.functions.invoke import Invoker
from emulators.functions.keys import ADMIN, Keys, presented_key
from emulators.functions.routes import MethodNotAllowed, RouteTable

log = logging.getLogger(__name__)

HTTP_TRIGGER = "httpTrigger"
INVOKE_REASON = "This function was programmatically called via the host APIs."
ALL_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
# Kestrel's MaxRequestLineSize under the real host: method, target and version (the query included). aiohttp
# reads lines up to PARSE_LINE_BYTES, so that this host can answer a longer one itself, in JSON.
REQUEST_LINE_BYTES = 8192
PARSE_LINE_BYTES = 8 * REQUEST_LINE_BYTES
LANDING_PAGE = b"<html><body><h1>Your Functions 4.0 app is up and running</h1><p>(local host)</p></body></html>"


@dataclass(frozen=True)
class HttpRoute:
    spec: FunctionSpec
    template: str
    methods: tuple[str, ...] | None
    auth_level: str


def http_routes(functions: Sequence[FunctionSpec]) -> list[HttpRoute]:
    routes = []
    for spec in functions:
        if spec.trigger_type != HTTP_TRIGGER:
            continue
        methods = spec.trigger.get("methods")
        routes.append(
            HttpRoute(
                spec=spec,
                template=str(spec.trigger.get("route") or spec.name),
                methods=tuple(str(m).upper() for m in methods) if methods else None,
                auth_level=str(spec.trigger.get("authLevel") or "function"),
            )
        )
    return routes


def route_url(base_url: str, route_prefix: str, template: str) -> str:
    parts = [p for p in (route_prefix.strip("/"), template.strip("/")) if p]
    return f"{base_url}/{'/'.join(parts)}"


class HttpFrontEnd:
    """The host's HTTP listener: function routes under the prefix, plus the admin status endpoint."""

    def __init__(
        self,
        routes: Sequence[HttpRoute],
        route_prefix: str,
        invoker: Invoker,
        host_id: str,
        keys: Keys | None = None,
        easy_auth: EasyAuth | None = None,
    ) -> None:
        self.routes = list(routes)
        self.route_prefix = route_prefix.strip("/")
        self.invoker = invoker
        self.host_id = host_id
        self.keys = keys
        self.easy_auth = easy_auth
        self.table: RouteTable[HttpRoute] = RouteTable()
        for route in self.routes:
            self.table.add(route.template, route.methods, route)

    def application(self, body_limit_bytes: int) -> web.Application:
        app = web.Application(client_max_size=body_limit_bytes)
        # Any path, newlines included (%0a is a legal route value): routing is this front end's own.
        app.router.add_route("*", r"/{tail:[\s\S]*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.path.rstrip("/").lower() == "/admin/host/status":
            if not self._authorized(request, ADMIN, "host"):
                return web.Response(status=401)
            return web.json_response({"id": self.host_id, "state": "Running", "processUptime": 0})
        line = len(request.method) + len(request.raw_path.encode()) + len(" HTTP/1.1") + 1
        if line > REQUEST_LINE_BYTES:
            message = (
                f"the request line is {line} bytes, more than the host's {REQUEST_LINE_BYTES}: "
                "send a shorter query (the platform answers 414)"
            )
            return host_error(414, "uri_too_long", message)
        relative = self._strip_prefix(request.path)
        resolved = None if relative is None else self.table.resolve(request.method, relative)
        if isinstance(resolved, MethodNotAllowed):
            allowed = ", ".join(resolved.allowed)
            message = f"this route takes {allowed}, not {request.method} (Allow: {allowed})"
            return host_error(405, "method_not_allowed", message, {"Allow": allowed})
        if resolved is None:
            if request.path == "/" and request.method in {"GET", "HEAD"}:
                return web.Response(body=LANDING_PAGE, content_type="text/html")
            return web.Response(status=404)
        headers = _joined(request.headers, ", ")
        if self.easy_auth is not None and resolved.target.template not in UNPROTECTED:
            try:  # the platform's gate comes before the host's own key check
                headers = self.easy_auth.admit(headers)
            except InvalidToken as e:
                return web.Response(status=401, body=unauthorized_body(str(e)), content_type="application/json")
        if not self._authorized(request, resolved.target.auth_level, resolved.target.spec.name):
            return web.Response(status=401)  # empty, as the real host answers
        return await self._invoke(request, resolved.target, resolved.values, headers)

    def _authorized(self, request: web.Request, auth_level: str, function_name: str) -> bool:
        """With keys configured, the route's auth level decides; without, every request passes (Core Tools)."""
        if self.keys is None:
            return True
        return self.keys.authorizes(auth_level, function_name, presented_key(request.headers, request.query))

    def _strip_prefix(self, path: str) -> str | None:
        path = path.lstrip("/")
        if not self.route_prefix:
            return path
        prefix = self.route_prefix.lower()
        lowered = path.lower()
        if lowered == prefix:
            return ""
        if lowered.startswith(prefix + "/"):
            return path[len(prefix) + 1 :]
        return None

    async def _invoke(
        self, request: web.Request, route: HttpRoute, values: dict[str, str], headers: dict[str, str]
    ) -> web.StreamResponse:
        body = await request.read()  # raises 413 past client_max_size
        http_request = func.HttpRequest(
            method=request.method,
            url=str(request.url),
            headers=headers,
            params=_joined(request.query, ","),
            route_params=values,
            body=body,
        )
        outcome = await self.invoker.invoke(route.spec, http_request, INVOKE_REASON)
        if not outcome.succeeded:
            return web.Response(status=500)
        return to_web_response(route.spec, outcome.value)


def host_error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
    """An answer of this host's own (the request never reaches a function), in JSON, in the app's error shape:
    `{"error": {"code", "message"}}`. The platform answers these empty (emulators/functions/README.md)."""
    body = {"error": {"code": code, "message": message}}
    return web.json_response(body, status=status, headers=headers)


def _joined(values: MultiMapping[str], separator: str) -> dict[str, str]:
    """Repeated headers or query keys as one comma-joined value, as the host passes them to the worker."""
    joined: dict[str, str] = {}
    for key in values:
        if key not in joined:
            joined[key] = separator.join(values.getall(key))
    return joined


def to_web_response(spec: FunctionSpec, value: Any) -> web.Response:
    """The function's `$return` as an HTTP response (HttpResponse, str or bytes; None is 204)."""
    if isinstance(value, func.HttpResponse):
        return _from_http_response(value)
    if isinstance(value, str):
        return web.Response(status=200, text=value)
    if isinstance(value, bytes | bytearray):
        return web.Response(status=200, body=bytes(value), content_type="application/octet-stream")
    if value is None:
        return web.Response(status=204)
    log.error(
        "Executed '%s' returned %s, which cannot be converted to an HTTP response",
        spec.full_name,
        type(value).__name__,
    )
    return web.Response(status=500)


def _from_http_response(response: func.HttpResponse) -> web.Response:
    headers = {str(k): str(v) for k, v in response.headers.items()}
    if not any(k.lower() == "content-type" for k in headers) and response.mimetype:
        charset = f"; charset={response.charset}" if response.charset else ""
        headers["Content-Type"] = f"{response.mimetype}{charset}"
    return web.Response(status=response.status_code, body=response.get_body(), headers=headers)
