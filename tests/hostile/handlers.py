"""The chunk handler of the hostile suite, loaded by the real app in the local host through `HANDLER`.

Every item succeeds, whatever JSON value it is (schemathesis sends any), except an object with
`"fragile": true` while the file `$HOSTILE_BROKEN_FLAG` exists: it fails retryably, so it ends up
parked (`"fragile": "permanent"`: it fails for good at once, parked on its first attempt). Deleting the
file is "fixing the cause" before a replay. An object with `"held": true` keeps its chunk in the handler
while the file `$HOSTILE_BROKEN_FLAG.held` exists (its batch is not final meanwhile: a final batch's parked
chunks are never replayed). Each item with an `"id"` is noted in `$HOSTILE_LOG_DIR/<pid>.log` (one id a
line, one append per chunk) so a test can count executions.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

from shared.handlers import ChunkContext, ChunkResult, ItemOutcome


def note(items: Sequence[Any]) -> None:
    ids = [str(item["id"]) for item in items if isinstance(item, dict) and isinstance(item.get("id"), str)]
    if not ids:
        return
    path = Path(os.environ["HOSTILE_LOG_DIR"]) / f"{os.getpid()}.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, "".join(f"{i}\n" for i in ids).encode())
    finally:
        os.close(fd)


def outcome(item: Any, broken: bool) -> ItemOutcome:
    if broken and isinstance(item, dict) and item.get("fragile") is True:
        return ItemOutcome.failure(f"item {item.get('id')} hit the broken dependency")
    if broken and isinstance(item, dict) and item.get("fragile") == "permanent":
        return ItemOutcome.failure(f"item {item.get('id')} hit the broken dependency", retryable=False)
    return ItemOutcome.success(None)


async def held(items: Sequence[Any]) -> ChunkResult:
    """Succeeds once `$HOSTILE_BROKEN_FLAG.held` is gone, waiting on the event loop, not on one of the few
    threads sync handlers share (the other chunks' calls go on meanwhile)."""
    flag = Path(os.environ["HOSTILE_BROKEN_FLAG"] + ".held")
    # Another process removes the file: no event of this one can carry it.
    while flag.exists():  # noqa: ASYNC110, ASYNC240
        await asyncio.sleep(0.05)
    return ChunkResult([ItemOutcome.success(None) for _ in items])


def settle(items: Sequence[Any], context: ChunkContext) -> ChunkResult | Coroutine[Any, Any, ChunkResult]:
    note(items)
    if any(isinstance(item, dict) and item.get("held") is True for item in items):
        return held(items)  # a sync handler may answer a coroutine: the engine awaits it on its loop
    broken = Path(os.environ["HOSTILE_BROKEN_FLAG"]).exists()
    return ChunkResult([outcome(item, broken) for item in items])
