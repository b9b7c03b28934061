"""Defects in what an item ends as, caught by the promises on outcomes (`sim.checks.promises`): an item ends in the
outcome the handler returned for it, and a discard never replaces a recorded outcome."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from shared.batch import results, settlement
from shared.batch.batches import Admission
from shared.batch.results import ResultEntry
from shared.batch.settlement import ResultRecord
from shared.engine import chunks
from shared.engine.chunks import ChunkWork
from shared.handlers import ItemOutcome
from shared.ops import lifecycle, progress, status
from sim.mutants.base import Mutant, scoped, swap

RETURNED = "but the handler returned"
DISCARDED = "a discard replaced it"


@contextmanager
def _transient_recorded_ok() -> Iterator[None]:
    """A retryable failure is recorded as a success without a value: the counts of a run whose transient items
    succeed later come out the same, the items' values and the handler's word do not."""

    def settle(**kwargs: Any) -> settlement.Settlement:
        outcomes = [o if o.ok or not o.retryable else ItemOutcome.success() for o in kwargs["outcomes"]]
        return settlement.settle(**{**kwargs, "outcomes": outcomes})

    yield from swap(chunks, "settle", settle)


@contextmanager
def _discard_replaces_outcome() -> Iterator[None]:
    """7f03c52 reverted (issue 36 item 2): the newest record of a lineage wins whatever it holds, and a chunk that
    comes back after its batch was cancelled or expired discards every item, so a discard written under a later
    attempt replaces the outcome a delivery whose delete was lost had recorded."""

    def newest(found: Iterable[ResultEntry]) -> list[ResultEntry]:
        best: dict[results.Key, ResultEntry] = {}
        for e in found:
            held = best.get(e.key)
            if held is None or (e.attempt, e.blob) > (held.attempt, held.blob):
                best[e.key] = e
        return sorted(best.values(), key=lambda e: e.key)

    async def discard(self: ChunkWork, item: Any, msg: Any, verdict: Admission) -> ResultRecord:
        items, positions = await self.load_items(msg)
        header = msg.header
        attempt = max(1, int(item.message.dequeue_count or 1) - header.skips)
        why = "expired" if verdict is Admission.EXPIRED else "cancelled"
        return settlement.discarded(header.batch_id, header.chunk, header.gen, attempt, positions, items, why=why)

    with contextlib.ExitStack() as stack:
        for module in (results, progress, lifecycle, status, chunks):
            stack.enter_context(scoped(module, "newest", newest))
        stack.enter_context(scoped(ChunkWork, "discard", discard))
        yield


MUTANTS = [
    Mutant("transient-recorded-ok", "none (made here)", "a retryable failure is recorded as a success without a "
           "value", _transient_recorded_ok, expect=RETURNED,
           invariant='outcomes as the handler returned them (`sim.checks.promises`)'),
    Mutant("discard-replaces-outcome", "7f03c52 (issue 36 item 2)", "a discard under a later attempt replaces a "
           "recorded outcome", _discard_replaces_outcome, expect=DISCARDED, family="lifecycle",
           invariant='an item ends cancelled or expired only unrun (`sim.checks.promises`)'),
]  # fmt: skip
