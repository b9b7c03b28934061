"""The chunk handler of the browser tests, loaded by the real app in the local host through `HANDLER`.

Every item succeeds, except an object with `"poison": true` while the file `$DASHBOARD_BROKEN_FLAG` exists:
it fails permanently, so its chunk is parked at once. Deleting the file is fixing the cause before a replay.
A chunk with an object `"held": true` waits (on the event loop) while `$DASHBOARD_BROKEN_FLAG.held` exists,
keeping its batch from being final: a final batch's parked chunks are never replayed.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

from shared.handlers import ChunkContext, ChunkResult, ItemOutcome


def outcome(item: Any, broken: bool) -> ItemOutcome:
    if broken and isinstance(item, dict) and item.get("poison") is True:
        return ItemOutcome.failure(f"item {item.get('id')} refused by the broken dependency", retryable=False)
    return ItemOutcome.success(None)


async def held(items: Sequence[Any]) -> ChunkResult:
    flag = Path(os.environ["DASHBOARD_BROKEN_FLAG"] + ".held")
    # Another process removes the file: no event of this one can carry it.
    while flag.exists():  # noqa: ASYNC110, ASYNC240
        await asyncio.sleep(0.05)
    return ChunkResult([ItemOutcome.success(None) for _ in items])


def settle(items: Sequence[Any], context: ChunkContext) -> ChunkResult | Coroutine[Any, Any, ChunkResult]:
    if any(isinstance(item, dict) and item.get("held") is True for item in items):
        return held(items)  # a sync handler may answer a coroutine: the engine awaits it on its loop
    broken = Path(os.environ["DASHBOARD_BROKEN_FLAG"]).exists()
    return ChunkResult([outcome(item, broken) for item in items])
