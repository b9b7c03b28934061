"""A small HTTP app for the local host's tests: echo, route constraints, errors and timeouts."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import azure.functions as func

app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
MARKERS = Path(os.environ.get("TEST_MARKER_DIR", "."))


@app.route(route="echo/{name}", methods=["POST", "PUT"])
async def echo(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    payload = {
        "method": req.method,
        "name": req.route_params.get("name"),
        "query": dict(req.params),
        "header": req.headers.get("x-test"),
        "body": req.get_body().decode(),
        "url": req.url,
        "invocation_id": context.invocation_id,
        "function_name": context.function_name,
    }
    return func.HttpResponse(
        json.dumps(payload), status_code=201, mimetype="application/json", headers={"X-Echo": "yes"}
    )


@app.route(route="items/{id:int}", methods=["GET"])
def item(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(f"item {int(req.route_params['id'])} on thread", status_code=200)


@app.route(route="items/latest", methods=["GET"])
def latest_item(req: func.HttpRequest) -> str:
    return "latest"


@app.route(route="boom")
async def boom(req: func.HttpRequest) -> func.HttpResponse:
    raise RuntimeError("boom on purpose")


@app.route(route="slow/{seconds}")
async def slow(req: func.HttpRequest) -> func.HttpResponse:
    marker = MARKERS / f"slow-{req.params.get('tag', 'x')}"
    try:
        await asyncio.sleep(float(req.route_params["seconds"]))
    except asyncio.CancelledError:
        marker.write_text("cancelled")
        raise
    marker.write_text("finished")
    return func.HttpResponse("done")


@app.route(route="block/{seconds}")
async def block(req: func.HttpRequest) -> func.HttpResponse:
    time.sleep(float(req.route_params["seconds"]))  # noqa: ASYNC251 - blocks the host's event loop, on purpose
    return func.HttpResponse("done")


@app.route(route="spin/{seconds}")
async def spin(req: func.HttpRequest) -> func.HttpResponse:
    until = time.thread_time() + float(req.route_params["seconds"])
    while time.thread_time() < until:  # computes on the host's event loop, on purpose
        pass
    return func.HttpResponse("done")


@app.route(route="slow-sync/{seconds}")
def slow_sync(req: func.HttpRequest) -> func.HttpResponse:
    time.sleep(float(req.route_params["seconds"]))
    (MARKERS / f"slow-sync-{req.params.get('tag', 'x')}").write_text("finished")
    return func.HttpResponse("done")


@app.route(route="with-blob")
@app.blob_input(arg_name="data", path="samples/{name}", connection="AzureWebJobsStorage")
def with_blob(req: func.HttpRequest, data: str) -> str:
    return data
