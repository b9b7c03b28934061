"""A Service Bus app for the local host's tests.

Each message body is JSON: {"id": ..., "action": "ok" | "fail" | "sleep", "seconds": n}. Every invocation
appends one JSON line to $TEST_MARKER_DIR/calls.jsonl (and a second one when it finishes).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import azure.functions as func

app = func.FunctionApp()
CALLS = Path(os.environ["TEST_MARKER_DIR"]) / "calls.jsonl"
running = 0


def record(**fields: Any) -> None:
    with CALLS.open("a") as f:
        f.write(json.dumps({"pid": os.getpid(), "at": time.time(), **fields}) + "\n")


@app.service_bus_queue_trigger(arg_name="msg", queue_name="%SB_QUEUE%", connection="SB_CONNECTION")
async def handle(msg: func.ServiceBusMessage) -> None:
    global running
    command = json.loads(msg.get_body())
    running += 1
    record(
        event="start",
        id=command["id"],
        delivery_count=msg.delivery_count,
        message_id=msg.message_id,
        running=running,
        properties=msg.application_properties,
    )
    try:
        if command["action"] == "fail":
            raise ValueError(f"failing {command['id']} on purpose")
        if command["action"] == "sleep":
            await asyncio.sleep(command["seconds"])
    finally:
        running -= 1
    record(event="end", id=command["id"])
