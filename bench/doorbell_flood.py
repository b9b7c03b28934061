"""`python -m bench.doorbell_flood [--tenants N] [--idle-s S]`: what a flood's doorbells cost once it is drained.

N one-item submits for N tenants (through `shared.intake.submit`, in this process) ring N doorbells on the Service
Bus stand-in; this process then serves the trigger queue one event at a time, as the drain function does with
`maxConcurrentCalls` 1: the first doorbell's drain takes the whole flood, and the others come due after it. The
figure is the storage transactions of every event served in the `--idle-s` seconds after that drain (the app's
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
        for i in range(tenants):
            body = json.dumps({"id": f"flood-{i}"}).encode()
            await submit(
                services, body, content_type="application/x-ndjson", content_encoding=None, idempotency_key=None,
                lane=Lane("", f"tenant{i}"),
            )  # fmt: skip
        submitted_s = time.monotonic() - started
        async with ServiceBusClient.from_connection_string(stack.servicebus) as client:
            async with client.get_queue_receiver(services.settings.trigger_queue) as receiver:
                first, served = None, Counter[str]()
                before: dict[str, int] = {}
                deadline = None
                while deadline is None or time.monotonic() < deadline:
                    wait = 30.0 if deadline is None else max(0.1, deadline - time.monotonic())
                    messages = await receiver.receive_messages(max_message_count=1, max_wait_time=wait)
                    for message in messages:
                        report = await route(services, TriggerEvent.decode(b"".join(message.body)))
                        await receiver.complete_message(message)
                        if first is None:  # the flood's drain: the idle window starts as it ends
                            first, before = report, services.counter.totals()
                            deadline = time.monotonic() + idle_s
                        else:
                            served[f"{report.reason}:{report.outcome}"] += 1
        after = services.counter.totals()
        spent = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
        return {
            "tenants": tenants,
            "submit_s": round(submitted_s, 1),
            "first_drain": {"items_ok": first.items_ok if first else 0, "seconds": first.seconds if first else None},
            "idle_s": idle_s,
            "events_after": dict(sorted(served.items())),
            "transactions_after": sum(spent.values()),
            "by_operation": dict(sorted(spent.items())),
        }
    finally:
        await runtime.close()


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
