"""A record naming positions outside its chunk, caught by the promise that records hold only their chunk's own
positions (`sim.checks.promises.records_within_chunks`). The status route and the export keep to the chunk's range
(`shared.ops.status`, `shared.ops.lifecycle.export`), so such a record shows to a user only as an item missing
from the export, and not even that where the export fills a never-started batch's items in as cancelled."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from shared.engine.chunks import ChunkWork
from sim.mutants.base import Mutant, swap

OUTSIDE = "outside it"  # what `records_within_chunks` writes


@contextmanager
def _discard_names_batch_positions() -> Iterator[None]:
    """A defect of our making: a chunk discarded unrun (its batch cancelled or expired) records its items at their
    positions in the batch (the chunk's start plus the position, as `ChunkContext` names an item since 6b87931),
    not at their positions in the chunk."""
    discard = ChunkWork.discard

    async def shifted(self: ChunkWork, item: Any, msg: Any, verdict: Any) -> Any:
        record = await discard(self, item, msg, verdict)
        start = msg.header.start or 0
        if record is None or not start:
            return record
        return replace(
            record,
            cancelled=[p + start for p in record.cancelled],
            expired=[p + start for p in record.expired],
            ids=[(p + start, i) for p, i in record.ids],
            lineage_first=record.first,
        )

    yield from swap(ChunkWork, "discard", shifted)


MUTANTS = [
    Mutant("discard-names-batch-positions", "none (made here)", "a chunk discarded unrun records its items at their "
           "positions in the batch, not in the chunk", _discard_names_batch_positions, family="lifecycle",
           expect=OUTSIDE, invariant="a record holds only its chunk's positions (`sim.checks.promises`)"),
]  # fmt: skip
