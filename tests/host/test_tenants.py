"""Tenants and priority on the whole local stack: the real app in the local host, the real broker and Azurite,
batches submitted over HTTP with `X-Tenant` and `?priority=high`.

A large batch of the shared tenant is draining (a handler that waits 100 ms a chunk, two chunks at a time, so
it takes about ten seconds); a small batch of another tenant, and a small high-priority batch of the shared
tenant, submitted after it, must each complete long before it does.
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
from tests.host.test_function_app import app_settings


def ndjson(tag: str, n: int) -> bytes:
    return "\n".join(json.dumps({"b": tag, "i": i}) for i in range(n)).encode()


@pytest.fixture
def tenant_host(
    tmp_path: Path, azurite_service: Azurite, servicebus_service: ServiceBus, names: Names
) -> Iterator[RunningHost]:
    env = app_settings(azurite_service, servicebus_service, names, "tenants") | {
        "HANDLER": "bench.tools.handlers:record_then_wait",
        "BENCH_WAIT_MS_PER_CHUNK": "100",
        "CHUNK_MAX_ITEMS": "10",
        "CHUNK_CONCURRENCY": "2",
        "RECEIVERS": "1",
        "RECEIVE_BATCH": "4",
    }
    launcher = HostLauncher(tmp_path)
    try:
        yield launcher.start(ROOT, env=env)
    finally:
        launcher.stop_all()


async def post(session: aiohttp.ClientSession, body: bytes, **query: str) -> dict[str, Any]:
    headers = {"Content-Type": "application/x-ndjson"}
    if "tenant" in query:
        headers["X-Tenant"] = query.pop("tenant")
    async with session.post("/api/batches", data=body, headers=headers, params=query) as response:
        accepted: dict[str, Any] = await response.json()
        assert response.status == 202, accepted
    return accepted


async def status_of(session: aiohttp.ClientSession, batch: dict[str, Any]) -> dict[str, Any]:
    async with session.get(batch["status_url"]) as response:
        status: dict[str, Any] = await response.json()
        assert response.status == 200, status
    return status


async def started(session: aiohttp.ClientSession, batch: dict[str, Any]) -> None:
    """Until the batch's first item has succeeded: its drain is under way."""
    for _ in range(300):
        if (await status_of(session, batch))["items"]["succeeded"]:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"batch {batch['batch_id']} did not start within 30 s")


async def completed(session: aiohttp.ClientSession, batch: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout_s
    status: dict[str, Any] = {}
    while asyncio.get_running_loop().time() < deadline:
        status = await status_of(session, batch)
        if status["status"] == "completed":
            return status
        await asyncio.sleep(0.2)
    raise AssertionError(f"batch {batch['batch_id']} did not complete in {timeout_s} s: {status}")


async def test_another_tenants_batch_and_a_high_priority_one_overtake_a_draining_backlog(
    tenant_host: RunningHost,
) -> None:
    async with aiohttp.ClientSession(base_url=tenant_host.base_url) as session:
        backlog = await post(session, ndjson("a", 2_000))  # 200 chunks: about 10 s at 2 x 100 ms
        await started(session, backlog)
        other = await post(session, ndjson("b", 10), tenant="bolt")
        urgent = await post(session, ndjson("h", 10), priority="high")
        assert (other["tenant"], urgent["priority"]) == ("bolt", "high")

        other_done = await completed(session, other, timeout_s=30)
        urgent_done = await completed(session, urgent, timeout_s=30)
        still = await status_of(session, backlog)
        async with session.get("/api/queues") as response:
            tenants = {t["tenant"] for t in (await response.json())["tenants"]}
        backlog_done = await completed(session, backlog, timeout_s=90)

    assert still["items"]["pending"] > 0, "both small batches completed while the backlog still had work"
    assert still["lane"]["tenant"] == "default"
    assert other_done["completed_at"] < backlog_done["completed_at"]
    assert urgent_done["completed_at"] < backlog_done["completed_at"]
    assert {"default", "bolt"} <= tenants
