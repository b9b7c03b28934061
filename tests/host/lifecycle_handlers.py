"""Chunk handlers for the lifecycle tests in the real host: each call appends what it saw to
$TEST_MARKER_DIR/handled.jsonl (when it started, and each item's outcome), so a test can compare the results
export and the cancel bound against what the handler really did."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shared.handlers import ChunkContext, ChunkResult, ItemOutcome


def _log(context: ChunkContext, started: float, seen: list[dict[str, Any]]) -> None:
    line = {"batch": context.batch_id, "chunk": context.chunk, "started": started, "ended": time.time(), "items": seen}
    with (Path(os.environ.get("TEST_MARKER_DIR", ".")) / "handled.jsonl").open("a") as out:
        out.write(json.dumps(line) + "\n")


async def sevens_fail(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    """Items whose `n` is a multiple of 7 fail for good; the others succeed with {"double": 2n}. Waits
    SLOW_MS_PER_CHUNK first (a downstream call), so a cancel can race a running drain."""
    started = time.time()
    await asyncio.sleep(float(os.environ.get("SLOW_MS_PER_CHUNK") or 0) / 1000)
    outcomes, seen = [], []
    for item in items:
        n = item["n"]
        if n % 7 == 0:
            outcomes.append(ItemOutcome.failure(f"{n} is a multiple of 7", retryable=False))
            seen.append({"id": item["id"], "ok": False, "reason": f"{n} is a multiple of 7"})
        else:
            outcomes.append(ItemOutcome.success({"double": 2 * n}))
            seen.append({"id": item["id"], "ok": True, "value": {"double": 2 * n}})
    _log(context, started, seen)
    return ChunkResult(outcomes)


def handled(markers: Path) -> list[dict[str, Any]]:
    path = markers / "handled.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def slow_sync(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    """A sync handler (on a thread): notes when its call began in begun.jsonl, then works SLOW_MS_PER_CHUNK (a
    blocking downstream call) and succeeds on every item."""
    started = time.time()
    line = {"batch": context.batch_id, "chunk": context.chunk, "started": started}
    with (Path(os.environ.get("TEST_MARKER_DIR", ".")) / "begun.jsonl").open("a") as out:
        out.write(json.dumps(line) + "\n")
    time.sleep(float(os.environ.get("SLOW_MS_PER_CHUNK") or 0) / 1000)
    return ChunkResult([ItemOutcome.success() for _ in items])


def begun(markers: Path) -> list[dict[str, Any]]:
    path = markers / "begun.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
