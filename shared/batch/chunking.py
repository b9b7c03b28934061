"""Cut a batch's items into chunks, the unit of work, by item count and encoded size (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Chunk:
    index: int
    start: int  # position of the chunk's first item in the batch
    items: Sequence[str]  # compact JSON text of each item

    @property
    def count(self) -> int:
        return len(self.items)


def plan_chunks(items: Sequence[str], *, max_items: int, max_bytes: int) -> list[Chunk]:
    """Consecutive items, at most `max_items` and about `max_bytes` of JSON per chunk.

    An item larger than `max_bytes` gets a chunk of its own rather than being refused here;
    the intake limits (MAX_ITEM_BYTES) decide what is too large to accept at all.
    """
    if max_items < 1 or max_bytes < 1:
        raise ValueError("chunk limits must be positive")
    chunks: list[Chunk] = []
    start = 0
    size = 0
    for n, item in enumerate(items):
        item_size = len(item) + 1  # the separating comma
        if n > start and (n - start >= max_items or size + item_size > max_bytes):
            chunks.append(Chunk(len(chunks), start, items[start:n]))
            start, size = n, 0
        size += item_size
    if start < len(items):
        chunks.append(Chunk(len(chunks), start, items[start:]))
    return chunks


def partition_of(chunk_index: int, *, offset: int, partitions: int) -> int:
    """Spread a batch's chunks round-robin over the partitions, from a per-batch offset."""
    return (offset + chunk_index) % partitions
