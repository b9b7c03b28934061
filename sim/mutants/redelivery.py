"""A chunk whose delivery recorded it, then lost its message's update or delete, handled again when it comes back,
caught by the promise that a notice never contradicts its batch's final status (`sim.checks.promises`): an item
parked after its last attempt succeeds on the next, and its batch, stamped and noticed `completed_with_failures`,
reads `completed`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from shared.engine.chunks import ChunkWork
from sim.mutants.base import Mutant, swap

CONTRADICTED = "but a completion notice at"  # what `promises` writes of a notice the batch's status contradicts


@contextmanager
def _recorded_lineage_worked_again() -> Iterator[None]:
    """The fix reverted (issue 37, lifecycle seed 27): no delivery looks for its lineage's record, so one that
    follows a delivery whose delete was lost calls the handler again, and its newer record replaces the outcome."""

    async def never(self: ChunkWork, item: Any, msg: Any) -> list[int] | None:
        return None

    yield from swap(ChunkWork, "recorded", never)


MUTANTS = [
    Mutant("recorded-lineage-worked-again", "c67e0de", "a chunk recorded by a delivery whose "
           "delete was lost is handled again when it comes back, its newer record replacing the outcome (a parked "
           "failure turned success after the batch was final)", _recorded_lineage_worked_again, family="lifecycle",
           expect=CONTRADICTED,
           invariant="a notice never contradicts its batch's final status (`sim.checks.promises`)"),
]  # fmt: skip
