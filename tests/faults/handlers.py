"""Chunk handlers for the fault suite, loaded by the real app in the local host through `HANDLER`.

`record` notes every item it starts on in `$FAULT_LOG_DIR/<pid>.log` (one id a line, one write per
chunk, appended), so a test can count handler executions across `kill -9` and restarts and across
several hosts. It waits `$FAULT_CHUNK_DELAY_S` per chunk, so kills land while chunks are in flight.

Items may ask to fail: `"fail": "transient"` fails on the first attempt only, `"always"` fails
(retryably) on every attempt, `"permanent"` fails at once with `retryable=False`, `"until-fixed"` fails
permanently until the file `$FAULT_LOG_DIR/fixed` exists (an operator fixed the cause; then replay), and
`"held"` keeps its chunk in the handler until the file `$FAULT_LOG_DIR/released` exists, then succeeds (its
batch is not final meanwhile: a final batch's parked chunks are never replayed).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shared.handlers import ChunkContext, ChunkResult, ItemOutcome


def log_path() -> Path:
    return Path(os.environ["FAULT_LOG_DIR"]) / f"{os.getpid()}.log"


def note(ids: Sequence[str]) -> None:
    # O_APPEND and one write per chunk: a kill leaves whole lines, and hosts never interleave within one.
    fd = os.open(log_path(), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, "".join(f"{i}\n" for i in ids).encode())
    finally:
        os.close(fd)


def outcome(item: Any, attempt: int) -> ItemOutcome:
    fail = item.get("fail") if isinstance(item, dict) else None
    if fail == "permanent":
        return ItemOutcome.failure(f"item {item['id']} is invalid (permanent)", retryable=False)
    if fail == "until-fixed" and not (Path(os.environ["FAULT_LOG_DIR"]) / "fixed").exists():
        return ItemOutcome.failure(f"item {item['id']} needs a fix", retryable=False)
    if fail == "always":
        return ItemOutcome.failure(f"item {item['id']} keeps failing")
    if fail == "transient" and attempt < 2:
        return ItemOutcome.failure(f"item {item['id']} hit a transient error")
    return ItemOutcome.success({"id": item["id"]})


async def record(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    note([str(item["id"]) for item in items])
    if any(isinstance(item, dict) and item.get("fail") == "held" for item in items):
        # The release is a file another process writes: no event of this process can carry it.
        while not (Path(os.environ["FAULT_LOG_DIR"]) / "released").exists():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    await asyncio.sleep(float(os.environ.get("FAULT_CHUNK_DELAY_S", "0")))
    return ChunkResult([outcome(item, context.attempt) for item in items])


async def timed(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    """`record`, and each chunk's start and end (monotonic clock, shared by the processes of one machine) and
    its item count in `$FAULT_LOG_DIR/<pid>.times`, so a test can measure rate and concurrency across hosts."""
    started = time.monotonic()
    result = await record(items, context)
    line = f"{started:.6f} {time.monotonic():.6f} {len(items)}\n"
    fd = os.open(log_path().with_suffix(".times"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return result
