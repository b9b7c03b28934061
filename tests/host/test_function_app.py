"""The real function_app.py, unchanged, in the local host against the real Azurite and broker.

The `make run` walk-through as a test: POST the example NDJSON to /api/batches, then the Service Bus
trigger drains it and GET /api/batches/{id} reports `completed`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devstack.host import ROOT
from tests.conftest import Azurite, Names
from tests.fixtures_servicebus import ServiceBus
from tests.host.conftest import HostLauncher, RunningHost

EXAMPLE = ROOT / "examples" / "transactions.ndjson"


def app_settings(azurite: Azurite, servicebus: ServiceBus, names: Names, host_id: str) -> dict[str, str]:
    """The real app's settings for one test: its own queues and containers on the shared services."""
    return {
        "AzureWebJobsStorage": azurite.connection_string,
        "ServiceBusConnection": servicebus.connection_string,
        "AzureFunctionsWebHost__hostid": f"{host_id}-{names.token}",
        "FUNCTIONS_WORKER_RUNTIME": "python",
        "TRIGGER_QUEUE": names.queue("trigger"),
        "WORK_QUEUE": names.queue("work"),
        "BATCHES_CONTAINER": names.container("batches"),
        "RESULTS_CONTAINER": names.container("results"),
        "STATE_CONTAINER": names.container("state"),
        "FALLBACK_SCHEDULE": "0 */1 * * * *",
    }


@pytest.fixture
def app_host(
    tmp_path: Path, azurite_service: Azurite, servicebus_service: ServiceBus, names: Names
) -> Iterator[RunningHost]:
    env = app_settings(azurite_service, servicebus_service, names, "app")
    launcher = HostLauncher(tmp_path)
    try:
        yield launcher.start(ROOT, env=env)
    finally:
        launcher.stop_all()


def test_the_host_lists_every_function_of_the_real_app(app_host: RunningHost) -> None:
    log = app_host.log()
    base = app_host.base_url
    assert f"submit_batch: [POST] {base}/api/batches" in log
    assert f"batch_status: [GET] {base}/api/batches/{{batch_id}}" in log
    assert f"queue_status: [GET] {base}/api/queues" in log
    assert "drain: serviceBusTrigger (trigger-" in log
    assert "fallback_poll: timerTrigger (0 */1 * * * *)" in log
    assert "is in error" not in log


async def submit_example(session: aiohttp.ClientSession) -> dict[str, Any]:
    """POST the example NDJSON; the 202's body (its Location is its status_url)."""
    async with session.post(
        "/api/batches", data=EXAMPLE.read_bytes(), headers={"Content-Type": "application/x-ndjson"}
    ) as response:
        accepted: dict[str, Any] = await response.json()
        assert response.status == 202, accepted
        assert response.headers["Location"] == accepted["status_url"]
    return accepted


async def test_the_example_batch_drains_to_completed_through_service_bus(app_host: RunningHost) -> None:
    async with aiohttp.ClientSession(base_url=app_host.base_url) as session:
        accepted = await submit_example(session)
        assert accepted["items"] == 1000
        status = await poll_until_done(session, accepted["status_url"], timeout_s=60)
        async with session.get("/api/queues") as response:
            assert response.status == 200
    assert status["status"] == "completed", status
    log = app_host.wait_for_log("Executed 'Functions.drain' (Succeeded")
    assert "Executed 'Functions.submit_batch' (Succeeded" in log


async def poll_until_done(session: aiohttp.ClientSession, url: str, timeout_s: float) -> dict[str, object]:
    deadline = asyncio.get_running_loop().time() + timeout_s
    status: dict[str, object] = {}
    while asyncio.get_running_loop().time() < deadline:
        async with session.get(url) as response:
            assert response.status == 200
            status = json.loads(await response.read())
        if str(status.get("status", "")).startswith("completed"):
            return status
        await asyncio.sleep(0.5)
    raise AssertionError(f"the batch did not complete in {timeout_s} s: {status}")
