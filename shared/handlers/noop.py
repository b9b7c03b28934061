"""A handler that succeeds at once on every item: measures the drain machinery alone (benchmarks)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shared.handlers import ChunkContext, ChunkResult, ItemOutcome

_OK = ItemOutcome.success()


async def handle(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    return ChunkResult([_OK] * len(items))
