"""`python -m bench.doorbell_flood [--tenants N] [--idle-s S]`: what a flood's doorbells cost once it is drained.

N one-item submits for N tenants (through `shared.intake.submit`, in this process) ring N doorbells on the Service
Bus stand-in while this process serves the trigger queue one event at a time, as the drain function does with
`maxConcurrentCalls` 1: doorbells queue behind each drain, and come due after it. The figure is the storage
transactions of every event served in the `--idle-s` seconds after the flood's last item was handled (the app's
metering: `shared.telemetry.metering`), with the outcome of each (issue 36 item 16: 2,000 doorbells cost 5,826
transactions in the first idle minute before doorbells a closing look covered ended at once). Azurite and the
broker are started on free ports and stopped at the end; the result goes to stdout as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from azure.servicebus.aio import ServiceBusClient

from bench.tools.config import app_env, trigger_queue
from bench.tools.stack import Stack
from shared import runtime
from shared.core.events import TriggerEvent
from shared.core.lanes import Lane
from shared.core.settings import Settings
from shared.intake.submit import submit
from shared.router import route


async def flood(stack: Stack, token: str, tenants: int, idle_s: float) -> dict[str, Any]:
    env = app_env(stack.storage, stack.servicebus, "flood", token, HANDLER="shared.handlers.noop:handle")
    runtime.configure(Settings.from_env(env))
    services = runtime.services()
    try:
        started = time.monotonic()
        submitting = asyncio.create_task(submit_all(services, tenants))
        handled, served, before = 0, Counter[str](), {}
        drained_at: float | None = None  # when the flood's last item was handled: the idle window starts
        async with ServiceBusClient.from_connection_string(stack.servicebus) as client:
            async with client.get_queue_receiver(services.settings.trigger_queue) as receiver:
                while drained_at is None or time.monotonic() < drained_at + idle_s:
                    left = 5.0 if drained_at is None else drained_at + idle_s - time.monotonic()
                    for message in await receiver.receive_messages(max_message_count=1, max_wait_time=max(0.1, left)):
                        report = await route(services, TriggerEvent.decode(b"".join(message.body)))
                        await receiver.complete_message(message)
                        handled += report.items_ok
                        if drained_at is not None:
                            served[f"{report.reason}:{report.outcome}"] += 1
                        elif handled >= tenants and submitting.done():
                            drained_at, before = time.monotonic(), services.counter.totals()
        submit_s = await submitting
        after = services.counter.totals()
        spent = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
        return {
            "tenants": tenants,
            "submit_s": round(submit_s, 1),
            "flood_drained_s": round((drained_at or started) - started, 1),
            "idle_s": idle_s,
            "events_after": dict(sorted(served.items())),
            "transactions_after": sum(spent.values()),
            "by_operation": dict(sorted(spent.items())),
        }
    finally:
        await runtime.close()


async def submit_all(services: Any, tenants: int) -> float:
    """N one-item submits, one tenant each, one after another (as fast as this process stores them)."""
    started = time.monotonic()
    for i in range(tenants):
        body = json.dumps({"id": f"flood-{i}"}).encode()
        await submit(
            services, body, content_type="application/x-ndjson", content_encoding=None, idempotency_key=None,
            lane=Lane("", f"tenant{i}"),
        )  # fmt: skip
    return time.monotonic() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.doorbell_flood", description=__doc__)
    parser.add_argument("--tenants", type=int, default=500)
    parser.add_argument("--idle-s", type=float, default=60.0)
    args = parser.parse_args(argv)
    token = uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory(prefix="flood-") as run_dir:
        stack = Stack(Path(run_dir), [trigger_queue("flood", token)]).start()
        try:
            result = asyncio.run(flood(stack, token, args.tenants, args.idle_s))
        finally:
            stack.stop_all()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
