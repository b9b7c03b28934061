"""docs/handler.md's handler to copy, taken from the page by its fence and run against a real HTTP downstream
(aiohttp on a free port): each item goes out with its stable key, `batch_id:position`, as its Idempotency-Key, and
each answer becomes the outcome the page says."""

from __future__ import annotations

import re
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from aiohttp import web

from shared.handlers import ChunkContext, ItemOutcome, Overloaded

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "handler.md").read_text()
BATCH = "b" * 32
ANSWERS = {"refused": 422, "flaky": 500, "busy": 429}


def guide_handler() -> types.ModuleType:
    blocks = re.findall(r"^```python\n(.*?)^```$", GUIDE, flags=re.MULTILINE | re.DOTALL)
    assert blocks, "docs/handler.md has a handler to copy"
    module = types.ModuleType("guide_orders")
    exec(compile(blocks[0], "docs/handler.md", "exec"), module.__dict__)  # noqa: S102 (the page's own code)
    return module


@pytest.fixture
async def downstream(unused_tcp_port: int) -> AsyncIterator[list[tuple[str, str]]]:
    seen: list[tuple[str, str]] = []

    async def orders(request: web.Request) -> web.Response:
        item = await request.json()
        seen.append((item["id"], request.headers["Idempotency-Key"]))
        status = ANSWERS.get(item["id"], 201)
        return web.json_response({"order": item["id"]}, status=status, headers={"Retry-After": "3"})

    app = web.Application()
    app.router.add_post("/orders", orders)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    try:
        yield seen
    finally:
        await runner.cleanup()


def context(positions: tuple[int, ...]) -> ChunkContext:
    return ChunkContext(BATCH, 0, 1, cast(Any, None), positions)


async def test_the_guides_handler_sends_each_items_stable_key_and_maps_each_answer(
    downstream: list[tuple[str, str]], unused_tcp_port: int
) -> None:
    module = guide_handler()
    module.FULFILMENT_URL = f"http://127.0.0.1:{unused_tcp_port}/orders"
    items = [{"id": "a"}, {"id": "refused"}, {"id": "flaky"}]
    result = await module.handle(items, context((4, 9, 12)))
    assert downstream == [("a", f"{BATCH}:4"), ("refused", f"{BATCH}:9"), ("flaky", f"{BATCH}:12")]
    assert result.outcomes[0] == ItemOutcome.success({"order": "a"})
    assert (result.outcomes[1].ok, result.outcomes[1].retryable) == (False, False), "a 4xx is parked"
    assert (result.outcomes[2].ok, result.outcomes[2].retryable) == (False, True), "a 5xx is retried alone"
    with pytest.raises(Overloaded) as overloaded:
        await module.handle([{"id": "busy"}], context((3,)))
    assert overloaded.value.retry_after_s == 3.0
    module.FULFILMENT_URL = "http://127.0.0.1:9/orders"
    unreachable = await module.handle([{"id": "a"}], context((0,)))
    assert unreachable.outcomes[0].reason == "fulfilment unreachable: ClientConnectorError"
