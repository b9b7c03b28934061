"""Every message a drain session leaves behind has a wake-up, and the watchdog comes after them (issue 18, items 2, 3, 4
and 12), each reproduced at its await point against the real Azurite, a storage fault raised as the SDK's own 503."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any

import pytest
from azure.storage.blob.aio import BlobLeaseClient
from azure.storage.queue.aio import QueueClient

from shared.core.errors import StorageUnavailable
from shared.core.events import Reason
from shared.engine.drainer import Drainer
from shared.handlers import ChunkResult, ItemOutcome
from shared.store.result_store import ResultWriter
from tests.app import handlers
from tests.app.conftest import RecordingPublisher, unavailable
from tests.app.sales import submit_ids

# -- 2, 3, 4, 12: every message left behind has a wake-up, and the watchdog comes after them -----------------

GATE: dict[str, Any] = {}


async def holding(items: list[Any], context: Any) -> Any:
    """`hold-*` items wait until GATE["open"] is set; `trans-*` fail on their first attempt; the rest succeed."""
    out = []
    for item in items:
        handlers.calls[item["id"]] += 1
        if item["id"].startswith("hold-"):
            GATE["entered"].set()
            await GATE["open"].wait()
        failing = item["id"].startswith("trans-") and context.attempt == 1
        out.append(ItemOutcome.failure("not yet") if failing else ItemOutcome.success())
    return ChunkResult(out)


@pytest.fixture
def gate():
    GATE.update(entered=asyncio.Event(), open=asyncio.Event())
    yield GATE
    GATE["open"].set()
    GATE.clear()


HOLDING = "tests.app.test_wakeups_left_behind:holding"


async def submitted(configure: Any, ids: list[str], **env: str) -> tuple[Any, RecordingPublisher]:
    """The app's services configured with `env` and a recording publisher, and one batch of `ids` submitted."""
    publisher = RecordingPublisher()
    services = configure(publisher=publisher, **env)
    await submit_ids(services, ids)
    return services, publisher


async def drained_wake_up_s(services: Any, publisher: RecordingPublisher) -> float:
    """Drain the work queue once; answers how long after the drain began the one wake-up it left is due."""
    start = datetime.now(timezone.utc)
    await Drainer(services, services.settings.work_queue).run()
    due = [at for e, at in publisher.events if e.reason is Reason.RETRY_DUE]
    assert len(due) == 1, "the message reappears by itself; a wake-up must come for it"
    assert due[0] is not None
    return (due[0] - start).total_seconds()


async def test_a_retry_s_wake_up_is_scheduled_when_the_retry_is_written_not_at_the_session_s_end(configure, gate):
    """Chunk 0 fails once and is rewritten for a retry while chunk 1 is still being worked: its wake-up must
    exist then (a crash before the session's end would otherwise lose it), with a margin over its visibility."""
    services, publisher = await submitted(
        configure, ["trans-1", "hold-1"], HANDLER=HOLDING, CHUNK_MAX_ITEMS="1", RETRY_BASE_DELAY_MS="2000",
        RETRY_MAX_DELAY_MS="2000", RETRY_JITTER="false",
    )  # fmt: skip
    start = datetime.now(timezone.utc)
    drain = asyncio.create_task(Drainer(services, services.settings.work_queue).run())
    try:
        await asyncio.wait_for(gate["entered"].wait(), 20)
        for _ in range(100):
            if any(e.reason is Reason.RETRY_DUE for e, _ in publisher.events):
                break
            await asyncio.sleep(0.1)
        due = [at for e, at in publisher.events if e.reason is Reason.RETRY_DUE]
        assert not drain.done()
        assert len(due) == 1, "scheduled while the session still runs"
        assert due[0] is not None
        assert (due[0] - start).total_seconds() >= 2 + 3, "visible after 2 s; at least 3 s of margin after that"
    finally:
        gate["open"].set()
        await drain


def failing_extensions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Wraps the SDK's update_message: a visibility extension (no new content) answers 503. Returns the ids
    of the messages whose extension failed."""
    real = QueueClient.update_message
    failed: list[str] = []

    async def update_message(client: QueueClient, message: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("content") is None:
            failed.append(str(getattr(message, "id", message)))
            raise unavailable()
        return await real(client, message, *args, **kwargs)

    monkeypatch.setattr(QueueClient, "update_message", update_message)
    return failed


async def test_a_message_left_behind_by_a_failed_extension_gets_a_wake_up_for_when_it_reappears(
    configure, gate, monkeypatch
):
    services, publisher = await submitted(configure, ["hold-1"], HANDLER=HOLDING, VISIBILITY_TIMEOUT_S="2")
    failed = failing_extensions(monkeypatch)

    assert await drained_wake_up_s(services, publisher) >= 2 + 3
    assert len(failed) == 1


async def test_a_message_left_behind_by_a_failed_result_write_gets_a_wake_up(configure, monkeypatch):
    services, publisher = await submitted(
        configure, ["w-1"], HANDLER="tests.app.handlers:record", VISIBILITY_TIMEOUT_S="4"
    )

    async def unavailable_write(self: ResultWriter, record: Any) -> None:
        raise StorageUnavailable("write result group", "503 Server Busy (test)")

    monkeypatch.setattr(ResultWriter, "write", unavailable_write)

    assert await drained_wake_up_s(services, publisher) >= 4 + 3


async def test_an_unreleased_lease_leaves_its_follow_up_for_when_it_has_expired(configure, monkeypatch):
    """The release fails (503) with work left: a `continue` now would meet our own lease and stop."""
    services, publisher = await submitted(configure, ["l-1"], HANDLER="tests.app.handlers:record", LEASE_S="15")

    async def failing_release(self: BlobLeaseClient, **kwargs: Any) -> None:
        raise unavailable()

    monkeypatch.setattr(BlobLeaseClient, "release", failing_release)
    start = datetime.now(timezone.utc)
    report = await Drainer(services, services.settings.work_queue, slot=2, budget_s=0).run()

    follow_ups = [(e, at) for e, at in publisher.events if e.reason is Reason.CONTINUE]
    assert len(follow_ups) == 1
    event, at = follow_ups[0]
    assert event.slot == 2, "the follow-up is for the slot whose lease it is"
    assert at is not None, "not at once"
    assert (at - start).total_seconds() >= 15
    assert report.outcome == "lease-unreleased"


@pytest.mark.slow
async def test_the_watchdog_moves_past_the_latest_visibility_the_drainer_set(configure, gate):
    """Chunk 0 fails once and is hidden for its 60 s retry delay; chunk 1 keeps the session going past a lease
    renewal (LEASE_S=15: one every 5 s). Were the drainer to die then, its watchdog must come after that
    message reappears; the old code kept it at 35 s (lease or visibility timeout + 5 s)."""
    services, publisher = await submitted(
        configure, ["trans-1", "hold-1"], HANDLER=HOLDING, CHUNK_MAX_ITEMS="1", LEASE_S="15",
        RETRY_BASE_DELAY_MS="60000", RETRY_MAX_DELAY_MS="60000", RETRY_JITTER="false",
    )  # fmt: skip
    start = datetime.now(timezone.utc)
    drain = asyncio.create_task(Drainer(services, services.settings.work_queue).run())
    try:
        await asyncio.wait_for(gate["entered"].wait(), 20)
        await asyncio.sleep(8)  # at least one renewal after the retry was written
        watchdogs = [at for e, at in publisher.events if e.reason is Reason.WATCHDOG]
        assert watchdogs
        latest = watchdogs[-1]
        assert latest is not None
        assert (latest - start).total_seconds() > 60, "after the retried message reappears (60 s)"
    finally:
        drain.cancel()  # the drainer dies here
        await asyncio.gather(drain, return_exceptions=True)
