"""The cancel and expiry bounds for a slow sync handler on the real local stack (issue 36 items 4 and 13):
function_app.py in the local host, the real Azurite and the Service Bus stand-in. The handler takes 3.5 s a
chunk on a thread, and more chunks are admitted at once (32) than the loop's default executor has threads (a
few per CPU); 150 chunks, so that waves of calls start before and after the bound: no call of a cancelled batch
starts later than ENDED_CHECK_S after the cancel's answer, and none of an expired one after its `expires_at`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import aiohttp
import pytest

from shared.batch.lifecycle import CLOCK_SKEW_S, ENDED_CHECK_S
from tests.conftest import Azurite, Names
from tests.fixtures_servicebus import ServiceBus
from tests.host.conftest import RunningHost
from tests.host.lifecycle_handlers import begun
from tests.host.test_lifecycle import numbered, start, status_of, submit, until_final


@pytest.fixture
def sync_host(
    tmp_path: Path, azurite_service: Azurite, servicebus_service: ServiceBus, names: Names
) -> Iterator[RunningHost]:
    yield from start(
        tmp_path, azurite_service, servicebus_service, names,
        HANDLER="tests.host.lifecycle_handlers:slow_sync", SLOW_MS_PER_CHUNK="3500", CHUNK_MAX_ITEMS="10",
        CHUNK_CONCURRENCY="32",
    )  # fmt: skip


async def until_begun(host: RunningHost, batch_id: str, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while sum(c["batch"] == batch_id for c in begun(host.markers)) < count:
        assert time.monotonic() < deadline, f"fewer than {count} handler calls began within {timeout_s} s"
        await asyncio.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_slow_sync_handler_starts_no_call_of_a_cancelled_batch_past_the_bound(sync_host: RunningHost) -> None:
    async with aiohttp.ClientSession(base_url=sync_host.base_url) as session:
        batch_id = (await submit(session, numbered(1500, "c")))["batch_id"]
        await until_begun(sync_host, batch_id, 2, 60)
        async with session.post(f"/api/batches/{batch_id}/cancel") as response:
            answered_at = time.time()
            assert response.status in (200, 202), await response.text()
        status = await until_final(session, batch_id, 120)
    calls = [c["started"] for c in begun(sync_host.markers) if c["batch"] == batch_id]
    assert status["status"] == "cancelled"
    assert max(calls) <= answered_at + ENDED_CHECK_S, f"a call began {max(calls) - answered_at:.1f} s after the answer"
    assert status["items"]["succeeded"] == 10 * len(calls)
    assert status["items"]["cancelled"] == 1500 - 10 * len(calls) > 0


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_slow_sync_handler_starts_no_call_of_an_expired_batch_after_its_deadline(
    sync_host: RunningHost,
) -> None:
    async with aiohttp.ClientSession(base_url=sync_host.base_url) as session:
        batch_id = (await submit(session, numbered(1500, "e"), expires_in_s="8"))["batch_id"]
        expires_at = datetime.fromisoformat((await status_of(session, batch_id))["expires_at"]).timestamp()
        status = await until_final(session, batch_id, 120)
    calls = [c["started"] for c in begun(sync_host.markers) if c["batch"] == batch_id]
    assert status["status"] == "expired"
    assert calls, "some of it was handled before its deadline"
    late = max(calls) - expires_at
    assert late <= CLOCK_SKEW_S, f"a call began {late:.1f} s after the batch's expires_at"
    assert status["items"]["expired"] == 1500 - 10 * len(calls) > 0
