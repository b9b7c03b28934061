"""The batch lifecycle (issue 28) on the real local stack: function_app.py in the local host, the real Azurite
and the Service Bus stand-in; the handler (tests/host/lifecycle_handlers.py) logs what it saw and when.

Results out, line by line against the handler; a cancel racing a running drain; a deadline and a start
time; a failure tolerance that ends a batch early; the CLI's `results` command.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devstack.host import ROOT
from shared import cli
from shared.batch.lifecycle import ENDED_CHECK_S
from tests.conftest import Azurite, Names
from tests.fixtures_servicebus import ServiceBus
from tests.host.conftest import HostLauncher, RunningHost
from tests.host.lifecycle_handlers import handled
from tests.host.test_function_app import app_settings

FINAL = {"completed", "completed_with_failures", "cancelled", "failed", "expired"}


def start(
    tmp_path: Path, azurite: Azurite, servicebus: ServiceBus, names: Names, **extra: str
) -> Iterator[RunningHost]:
    env = app_settings(azurite, servicebus, names, "life") | {
        "HANDLER": "tests.host.lifecycle_handlers:sevens_fail",
        "RETRY_BASE_DELAY_MS": "0",
        "RETRY_MAX_DELAY_MS": "0",
        **extra,
    }
    launcher = HostLauncher(tmp_path)
    try:
        yield launcher.start(ROOT, env=env)
    finally:
        launcher.stop_all()


@pytest.fixture
def host(
    tmp_path: Path, azurite_service: Azurite, servicebus_service: ServiceBus, names: Names
) -> Iterator[RunningHost]:
    yield from start(tmp_path, azurite_service, servicebus_service, names, CHUNK_MAX_ITEMS="100")


@pytest.fixture
def slow_host(
    tmp_path: Path, azurite_service: Azurite, servicebus_service: ServiceBus, names: Names
) -> Iterator[RunningHost]:
    """Small chunks, a handler that waits 400 ms a chunk, two chunks at a time: a drain that lasts a while."""
    yield from start(
        tmp_path, azurite_service, servicebus_service, names,
        CHUNK_MAX_ITEMS="10", SLOW_MS_PER_CHUNK="400", CHUNK_CONCURRENCY="2",
    )  # fmt: skip


def ndjson(items: list[dict[str, Any]]) -> bytes:
    return "\n".join(json.dumps(i) for i in items).encode()


def numbered(count: int, prefix: str) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}-{n}", "n": n} for n in range(count)]


async def submit(session: aiohttp.ClientSession, items: list[dict[str, Any]], **params: str) -> dict[str, Any]:
    async with session.post(
        "/api/batches", data=ndjson(items), params=params, headers={"Content-Type": "application/x-ndjson"}
    ) as response:
        body: dict[str, Any] = await response.json()
        assert response.status == 202, body
    return body


async def status_of(session: aiohttp.ClientSession, batch_id: str) -> dict[str, Any]:
    async with session.get(f"/api/batches/{batch_id}") as response:
        assert response.status == 200
        body: dict[str, Any] = await response.json()
    return body


async def until_final(session: aiohttp.ClientSession, batch_id: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = await status_of(session, batch_id)
        if status["status"] in FINAL:
            return status
        await asyncio.sleep(0.3)
    raise AssertionError(f"batch {batch_id} did not end within {timeout_s} s: {status}")


async def results(
    session: aiohttp.ClientSession, batch_id: str, limit: int = 100_000, **params: str
) -> tuple[list[dict[str, Any]], int]:
    """Every result line, page after page; and how many pages it took."""
    lines: list[dict[str, Any]] = []
    query: dict[str, str] = {"limit": str(limit), **params}
    pages = 0
    while True:
        async with session.get(f"/api/batches/{batch_id}/results", params=query) as response:
            assert response.status == 200, await response.text()
            assert response.headers["Content-Type"].startswith("application/x-ndjson")
            lines += [json.loads(line) for line in (await response.text()).splitlines()]
            pages += 1
            if "X-Continuation" not in response.headers:
                return lines, pages
            query["continuation"] = response.headers["X-Continuation"]


def items_seen(markers: Path, batch_id: str) -> dict[str, dict[str, Any]]:
    """Item id -> what the handler made of it, for one batch; each item handled at most once."""
    seen: dict[str, dict[str, Any]] = {}
    for call in handled(markers):
        if call["batch"] == batch_id:
            for item in call["items"]:
                assert item["id"] not in seen, f"{item['id']} was handled twice"
                seen[item["id"]] = item
    return seen


@pytest.mark.timeout(300)
async def test_a_ten_thousand_item_batch_exports_each_item_as_the_handler_saw_it(host: RunningHost) -> None:
    items = numbered(10_000, "x")
    async with aiohttp.ClientSession(base_url=host.base_url) as session:
        accepted = await submit(session, items)
        batch_id = accepted["batch_id"]
        status = await until_final(session, batch_id, 180)
        lines, pages = await results(session, batch_id, limit=3000)
        failed_only, _ = await results(session, batch_id, status="failed")
        async with session.get(f"/api/batches/{batch_id}/results", params={"status": "lost"}) as response:
            refused = await response.json()
            assert response.status == 400
    assert status["status"] == "completed_with_failures"
    assert pages == 4, "3,000 lines a page, resumed by its continuation"
    assert [line["position"] for line in lines] == list(range(10_000)), "one line per item, by position"
    seen = items_seen(host.markers, batch_id)
    for line in lines:
        item = items[line["position"]]
        assert line["id"] == item["id"]
        handler = seen[item["id"]]
        if handler["ok"]:
            assert (line["status"], line["value"]) == ("succeeded", handler["value"])
        else:
            assert (line["status"], line["reason"]) == ("failed", handler["reason"])
    counts = Counter(line["status"] for line in lines)
    assert counts["failed"] == status["items"]["failed"] == len(range(0, 10_000, 7))
    assert counts["succeeded"] == status["items"]["succeeded"]
    assert failed_only == [line for line in lines if line["status"] == "failed"]
    assert "status" in refused["error"]["message"]


@pytest.mark.timeout(300)
async def test_a_cancel_racing_a_drain_stops_handler_calls_within_the_bound_and_every_item_ends_once(
    slow_host: RunningHost,
) -> None:
    items = numbered(1500, "c")
    async with aiohttp.ClientSession(base_url=slow_host.base_url) as session:
        batch_id = (await submit(session, items))["batch_id"]
        deadline = time.monotonic() + 60
        while sum(c["batch"] == batch_id for c in handled(slow_host.markers)) < 6:
            assert time.monotonic() < deadline, "the drain did not start"
            await asyncio.sleep(0.1)
        async with session.post(f"/api/batches/{batch_id}/cancel") as response:
            answered_at = time.time()
            first = await response.json()
            assert response.status in (200, 202), first
        assert first["status"] in ("cancelling", "cancelled")
        status = await until_final(session, batch_id, 120)
        async with session.post(f"/api/batches/{batch_id}/cancel") as response:
            again = await response.json()
            assert response.status == 200, "cancel is idempotent"
        lines, _ = await results(session, batch_id)
        async with session.post("/api/poison/replay", json={"batch_id": batch_id}) as response:
            replay = await response.json()
            replay_code = response.status
    assert status["status"] == again["status"] == "cancelled"
    calls = [c for c in handled(slow_host.markers) if c["batch"] == batch_id]
    assert max(c["started"] for c in calls) <= answered_at + ENDED_CHECK_S, "no handler call began past the bound"
    assert [line["position"] for line in lines] == list(range(1500)), "every item ends exactly once"
    seen = items_seen(slow_host.markers, batch_id)
    ran = {items[line["position"]]["id"] for line in lines if line["status"] in ("succeeded", "failed")}
    assert ran == set(seen), "an item counts as handled exactly when the handler handled it"
    counts = Counter(line["status"] for line in lines)
    assert set(counts) <= {"succeeded", "failed", "cancelled"}
    assert counts["cancelled"] == status["items"]["cancelled"] > 0
    assert counts["succeeded"] == status["items"]["succeeded"] > 0
    assert status["items"]["pending"] == 0
    assert replay_code == 409
    assert replay["error"]["code"] == "batch_conflict", replay


@pytest.mark.timeout(300)
async def test_a_batch_past_its_deadline_is_expired_and_a_scheduled_one_waits_for_its_start(
    slow_host: RunningHost,
) -> None:
    async with aiohttp.ClientSession(base_url=slow_host.base_url) as session:
        ahead = await submit(session, numbered(400, "a"))  # 40 chunks, two at a time, 400 ms each: about 8 s
        late = await submit(session, numbered(30, "e"), expires_in_s="2")
        submitted_at = time.time()
        later = await submit(session, numbered(20, "s"), not_before="6")
        assert (await status_of(session, later["batch_id"]))["status"] == "scheduled"
        async with session.get("/api/batches", params={"limit": "3"}) as reply:
            listed = {b["batch_id"]: b["status"] for b in (await reply.json())["batches"]}
        assert listed[later["batch_id"]] == "scheduled", "the list says what the status route says"
        expired = await until_final(session, late["batch_id"], 120)
        started = await until_final(session, later["batch_id"], 120)
        await until_final(session, ahead["batch_id"], 120)
        lines, _ = await results(session, late["batch_id"], status="expired")
    assert expired["status"] == "expired", expired
    assert expired["items"]["expired"] + expired["items"]["succeeded"] + expired["items"]["failed"] == 30
    assert expired["items"]["expired"] == len(lines) > 0
    calls = handled(slow_host.markers)
    deadline_s = submitted_at + 2
    assert all(c["started"] <= deadline_s + 1 for c in calls if c["batch"] == late["batch_id"]), "none after it"
    assert started["status"] == "completed_with_failures"
    begun = [c["started"] for c in calls if c["batch"] == later["batch_id"]]
    assert begun
    assert min(begun) >= submitted_at + 6 - 1, "nothing of it was handled before not_before"


@pytest.mark.timeout(300)
async def test_a_batch_past_its_failure_tolerance_ends_failed_and_the_rest_is_cancelled(
    slow_host: RunningHost,
) -> None:
    async with aiohttp.ClientSession(base_url=slow_host.base_url) as session:
        batch_id = (await submit(session, numbered(1000, "f"), max_failed_fraction="0.02"))["batch_id"]
        status = await until_final(session, batch_id, 120)
        lines, _ = await results(session, batch_id)
        out = io.StringIO()
        code = await asyncio.to_thread(cli.main, ["--url", slow_host.base_url, "results", batch_id, "--failed"], out)
    assert status["status"] == "failed"
    assert status["ended_by"] == "max_failed_fraction"
    assert status["items"]["failed"] > 0.02 * 1000
    assert status["items"]["cancelled"] > 0
    assert status["items"]["pending"] == 0
    assert Counter(line["status"] for line in lines)["cancelled"] == status["items"]["cancelled"]
    assert code == 0
    assert [json.loads(line) for line in out.getvalue().splitlines()] == [
        line for line in lines if line["status"] == "failed"
    ], "the CLI prints the failed lines"


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"expires_in_s": "0"}, "expires_in_s"),
        ({"not_before": "tomorrow"}, "not_before"),
        ({"not_before": "9999999"}, "not_before"),
        ({"max_failed_fraction": "1.5"}, "max_failed_fraction"),
    ],
)
async def test_bad_lifecycle_options_are_a_json_400_naming_the_field_and_store_nothing(
    host: RunningHost, params: dict[str, str], named: str
) -> None:
    async with aiohttp.ClientSession(base_url=host.base_url) as session:
        async with session.post(
            "/api/batches", data=ndjson(numbered(3, "v")), params=params, headers={"Idempotency-Key": "k-" + named}
        ) as response:
            body = await response.json()
            assert response.status == 400
        async with session.get("/api/batches") as response:
            listed = await response.json()
    assert named in body["error"]["message"]
    assert listed["batches"] == [], "nothing stored"
