"""Keeping a held message invisible (`shared.engine.visibility`) on the real Azurite: the work runs in the caller's
task and a timer extends the message's visibility only when one is due (issue 42). What it promises, each case
waiting for the events it needs: an extension keeps the message from a second receiver; a failed extension cancels
the work and raises its error; a cancelled caller cancels the work and extends no more; work that ends while an
extension is under way returns after it; the work's own error is what the caller sees."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.queue.aio import QueueClient

from shared.core.errors import StorageError
from shared.engine.visibility import keeping_invisible
from shared.store.received import Received

VISIBILITY_S = 1  # the shortest a queue hides a message for: an extension is due after 0.6 s


@pytest.fixture
async def queue(storage_connection_string: str, names: Any) -> AsyncIterator[QueueClient]:
    client = QueueClient.from_connection_string(storage_connection_string, names.queue("visibility"))
    await client.create_queue()
    yield client
    await client.close()


async def held(queue: QueueClient) -> Received:
    await queue.send_message("a chunk")
    [message] = [m async for m in queue.receive_messages(max_messages=1, visibility_timeout=VISIBILITY_S)]
    return Received(message, queue, received_at=time.monotonic())


def extensions(queue: QueueClient, monkeypatch: pytest.MonkeyPatch, *, fail: bool = False) -> dict[str, Any]:
    """Wraps this client's update_message: counts the calls, answers 503 if `fail`, and holds each one while
    `hold` is clear (set by default)."""
    real = queue.update_message
    seen: dict[str, Any] = {"calls": 0, "entered": asyncio.Event(), "hold": asyncio.Event()}
    seen["hold"].set()

    async def update_message(message: Any, **kwargs: Any) -> Any:
        seen["calls"] += 1
        seen["entered"].set()
        await seen["hold"].wait()
        if fail:
            raise HttpResponseError(message="Server Busy (test)", response=None)  # translated at the boundary
        return await real(message, **kwargs)

    monkeypatch.setattr(queue, "update_message", update_message)
    return seen


async def test_an_extension_keeps_the_message_from_a_second_receiver(queue: QueueClient) -> None:
    item = await held(queue)
    stamps: list[int] = []
    twice = asyncio.Event()

    def extended(visible_at_ms: int) -> None:
        stamps.append(visible_at_ms)
        if len(stamps) == 2:
            twice.set()

    async def work() -> None:
        await twice.wait()  # past the first visibility timeout (1 s): two extensions at 0.6 s each

    await keeping_invisible(item, work(), visibility_s=VISIBILITY_S, clock=time.monotonic, extended=extended)
    assert [m async for m in queue.receive_messages(max_messages=1, visibility_timeout=1)] == []
    assert len(stamps) == 2
    assert stamps[1] > stamps[0]
    assert item.visible_at_ms == stamps[-1]
    await queue.delete_message(item.message, pop_receipt=item.pop_receipt)  # the latest pop receipt holds it


async def test_a_failed_extension_cancels_the_work_and_raises_its_error(
    queue: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    item = await held(queue)
    seen = extensions(queue, monkeypatch, fail=True)
    work_cancelled = asyncio.Event()

    async def work() -> None:
        try:
            await asyncio.Event().wait()  # never ends by itself
        except asyncio.CancelledError:
            work_cancelled.set()
            raise

    with pytest.raises(StorageError):
        await keeping_invisible(item, work(), visibility_s=VISIBILITY_S, clock=time.monotonic, extended=lambda _: None)
    assert work_cancelled.is_set()
    assert seen["calls"] == 1
    current = asyncio.current_task()
    assert current is not None
    assert current.cancelling() == 0, "no cancel request left on the caller's task"


async def test_a_cancelled_caller_cancels_the_work_and_extends_no_more(
    queue: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    item = await held(queue)
    seen = extensions(queue, monkeypatch)
    seen["hold"].clear()  # the first extension stays under way
    work_cancelled = asyncio.Event()

    async def work() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            work_cancelled.set()
            raise

    caller = asyncio.ensure_future(
        keeping_invisible(item, work(), visibility_s=VISIBILITY_S, clock=time.monotonic, extended=lambda _: None)
    )
    await seen["entered"].wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert work_cancelled.is_set()
    seen["hold"].set()
    await asyncio.sleep(0)
    assert seen["calls"] == 1, "the extension under way was cancelled"


async def test_work_that_ends_during_an_extension_returns_after_it(
    queue: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    item = await held(queue)
    seen = extensions(queue, monkeypatch)
    seen["hold"].clear()
    stamps: list[int] = []

    async def work() -> None:
        await seen["entered"].wait()  # ends while the extension waits on the queue's answer

    caller = asyncio.ensure_future(
        keeping_invisible(item, work(), visibility_s=VISIBILITY_S, clock=time.monotonic, extended=stamps.append)
    )
    await seen["entered"].wait()
    await asyncio.sleep(0)
    assert not caller.done(), "it waits for the extension under way"
    seen["hold"].set()
    await caller
    assert len(stamps) == 1
    assert seen["calls"] == 1
    await queue.delete_message(item.message, pop_receipt=item.pop_receipt)  # the extension's pop receipt


async def test_the_work_s_own_error_is_what_the_caller_sees(queue: QueueClient) -> None:
    item = await held(queue)

    async def work() -> None:
        raise ValueError("the chunk's own failure")

    with pytest.raises(ValueError, match="own failure"):
        await keeping_invisible(item, work(), visibility_s=VISIBILITY_S, clock=time.monotonic, extended=lambda _: None)
