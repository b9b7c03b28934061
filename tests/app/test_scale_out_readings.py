"""Scale-out under both readings of Service Bus's active count (issue 31).

The platform scales a Service Bus-triggered function by the trigger queue's ActiveMessageCount, and nobody
publishes whether a message locked by a running execution counts. The design must hold under both readings:
held `submitted`/`scale-out` events keep their instances only if locked messages count; what must hold either
way is that a queue with work left always has a trigger event the platform counts once its drainer's session
ends (`continue`, ready), so the backlog is drained by trigger events alone. Run on the real Service Bus
stand-in, started with each reading (`--locked-counts-as-active`), and the real Azurite.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus.aio import ServiceBusClient

from devstack.broker import ROOT, connection_string
from devstack.procs import LOOPBACK, ManagedProcess, free_port, python_module
from shared.core.events import Reason, TriggerEvent
from shared.ops.reports import read_batch_status
from shared.router import route
from tests.app import handlers
from tests.app.tenants import submit_to
from tests.fixtures_servicebus import SAMPLE_CONFIG

pytestmark = pytest.mark.timeout(180)

ITEMS = 24


def active(status_port: int, queue: str) -> int:
    with urllib.request.urlopen(f"http://{LOOPBACK}:{status_port}/counts", timeout=10) as response:
        return int(json.load(response).get(queue, {}).get("active_message_count", 0))


@pytest.fixture(params=["true", "false"], ids=["locked-counted", "locked-not-counted"])
def stand_in(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, int, bool]]:
    port, status_port = free_port(), free_port()
    args = ["--config", str(SAMPLE_CONFIG), "--host", LOOPBACK, "--port", str(port), "--auto-create-queues"]
    args += ["--status-port", str(status_port), "--locked-counts-as-active", request.param]
    process = ManagedProcess(
        "servicebus", python_module("emulators.servicebus", *args), [port, status_port], tmp_path / "sb.log", cwd=ROOT
    )
    process.start(timeout_s=30)
    try:
        yield connection_string(port), status_port, request.param == "true"
    finally:
        process.stop()


@pytest.mark.slow
async def test_whatever_the_reading_a_queue_with_work_left_keeps_a_counted_event_and_drains_by_events_alone(
    configure, stand_in
) -> None:
    conn, status_port, locked_counts = stand_in
    services = configure(
        servicebus=conn,
        HANDLER="tests.app.handlers:record",
        CHUNK_MAX_ITEMS="1",
        DRAIN_BUDGET_S="1",
        SCALE_OUT_DEPTH="4",
        MAX_DRAINERS_PER_QUEUE="3",
        CHUNK_CONCURRENCY="2",
        RECEIVE_BATCH="2",
        RECEIVERS="1",
    )
    handlers.reset()

    async def slow(_context: object) -> None:
        await asyncio.sleep(0.5)  # a session of 1 s cannot drain 24 chunks two at a time: each ends with work left

    handlers.on_chunk.append(slow)  # type: ignore[arg-type]
    trigger = services.settings.trigger_queue
    batch_id = await submit_to(services, "r", ITEMS)
    served: list[str] = []
    async with ServiceBusClient.from_connection_string(conn) as client:
        async with client.get_queue_receiver(trigger, max_wait_time=5) as receiver:
            first = True
            while len(served) < 60:
                held = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
                if not held:
                    break
                message = held[0]
                event = TriggerEvent.decode(b"".join(message.body))
                if first:
                    # The doorbell, held by its execution: counted only if locked messages count.
                    assert active(status_port, trigger) == (1 if locked_counts else 0)
                    first = False
                report = await route(services, event)
                served.append(f"{event.reason.value}:{report.outcome}")
                await receiver.complete_message(message)
                status = await read_batch_status(services, batch_id)
                if status["items"]["pending"]:
                    # Work is left and this execution has ended: whatever the reading, an event is counted.
                    assert active(status_port, trigger) >= 1, served
                elif status["status"] == "completed":
                    break
    status = await read_batch_status(services, batch_id)
    assert status["status"] == "completed", served
    assert sum(handlers.calls.values()) >= ITEMS
    assert any(s.startswith(Reason.CONTINUE.value) for s in served), served
