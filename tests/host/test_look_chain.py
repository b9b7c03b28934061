"""The fallback's look chain end to end: the real app in the local host, the real broker and Azurite.

The fallback timer ticks once a day here; a batch whose doorbell is lost must still complete, found by the look
its own submit scheduled on Service Bus.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
from azure.servicebus import ServiceBusClient

from devstack.host import ROOT
from shared import runtime
from shared.core.settings import Settings
from shared.intake.submit import submit
from tests.conftest import Azurite, Names
from tests.fixtures_servicebus import ServiceBus
from tests.host.conftest import HostLauncher
from tests.host.test_function_app import EXAMPLE, app_settings, poll_until_done
from tests.servicebus.sdk import take


def take_the_doorbell(connection_string: str, queue: str) -> list[str]:
    """Receive and complete what is on the trigger queue now: the doorbell, lost before any host sees it."""
    with ServiceBusClient.from_connection_string(connection_string) as client:
        with client.get_queue_receiver(queue) as receiver:
            return [json.loads(str(m))["reason"] for m in take(receiver, 1, wait_s=2)]


async def test_a_batch_whose_doorbell_was_lost_is_completed_by_its_scheduled_look_with_the_timer_a_day_away(
    tmp_path: Path, azurite_service: Azurite, servicebus_service: ServiceBus, names: Names
) -> None:
    env = app_settings(azurite_service, servicebus_service, names, "look") | {
        "FALLBACK_SCHEDULE": "0 0 0 * * *",
        "BACKOFF_FLOOR_MS": "4000",
        "BACKOFF_JITTER": "0",
    }
    # The submit runs here, with the app's own code and the real broker, before any host is up.
    runtime.configure(Settings.from_env(env))
    try:
        done = await submit(
            runtime.services(),
            EXAMPLE.read_bytes(),
            content_type="application/x-ndjson",
            content_encoding=None,
            idempotency_key=None,
        )
    finally:
        await runtime.close()
    assert done.trigger == "published"
    taken = await asyncio.to_thread(take_the_doorbell, servicebus_service.connection_string, env["TRIGGER_QUEUE"])
    assert taken == ["submitted"], "the doorbell is gone; the look, scheduled 4 s ahead, is not visible yet"

    launcher = HostLauncher(tmp_path)
    try:
        host = launcher.start(ROOT, env=env)
        async with aiohttp.ClientSession(base_url=host.base_url) as session:
            status = await poll_until_done(session, f"/api/batches/{done.manifest.batch_id}", timeout_s=60)
        log = host.wait_for_log("every lane is empty; the chain ends", timeout_s=30)
    finally:
        launcher.stop_all()
    assert status["status"] == "completed", status
    assert "no trigger announced; trigger published" in log, "the look called a drainer for the unannounced work"
    assert "Executing 'Functions.fallback_poll'" not in log, "the timer never ran"
