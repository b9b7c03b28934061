"""The work items every system gets: billing-like sales, tagged with the batch they belong to (pure)."""

from __future__ import annotations

import json
from typing import Any


def items(tag: str, count: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "b": tag,
            "i": i,
            "id": f"sale-{i:07d}",
            "amount": f"{1 + i % 997}.{i % 100:02d}",
            "currency": ("EUR", "USD", "GBP")[i % 3],
            "author": f"author-{i % 53}",
            "distributor": "shop",
        }
        for i in range(start, start + count)
    ]


def ndjson(batch: list[dict[str, Any]]) -> bytes:
    return "\n".join(json.dumps(item, separators=(",", ":")) for item in batch).encode("ascii")


def message_text(item: dict[str, Any]) -> str:
    """A peer's queue message: one item."""
    return json.dumps(item, separators=(",", ":"))
