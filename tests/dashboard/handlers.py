"""The chunk handler of the browser tests, loaded by the real app in the local host through `HANDLER`.

Every item succeeds, except an object with `"poison": true` while the file `$DASHBOARD_BROKEN_FLAG` exists:
it fails permanently, so its chunk is parked at once. Deleting the file is fixing the cause before a replay.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shared.handlers import ChunkContext, ChunkResult, ItemOutcome


def outcome(item: Any, broken: bool) -> ItemOutcome:
    if broken and isinstance(item, dict) and item.get("poison") is True:
        return ItemOutcome.failure(f"item {item.get('id')} refused by the broken dependency", retryable=False)
    return ItemOutcome.success(None)


def settle(items: Sequence[Any], context: ChunkContext) -> ChunkResult:
    broken = Path(os.environ["DASHBOARD_BROKEN_FLAG"]).exists()
    return ChunkResult([outcome(item, broken) for item in items])
