"""A chunk that gets its place after its session's budget is spent still admitted, and discarded if its batch ended,
caught by the promise that a drain session ends within its budget and its calls' settling (`sim.sessions`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from shared.engine.held import HeldMessages
from shared.store.received import Received
from sim.mutants.base import Mutant, scoped
from sim.sessions import OVERRUN


@contextmanager
def _held_admitted_past_budget() -> Iterator[None]:
    """45ebe73 reverted: each chunk still waiting for a place when the budget runs out takes the place in turn for
    its admission, and a cancelled or expired batch's chunk is discarded there (its record and its delete, each
    retried by the storage SDK for about 16 s in an outage), one after another past the budget."""

    async def admitted(self: HeldMessages, item: Received, placed: Callable[[], None] | None = None) -> None:
        async with self._slots.place(item.queue.queue_name):
            self.lanes.started += 1
            if placed is not None:
                placed()
            worked = await self._admit_and_work(item)
        if worked is not None:
            await self.settler.settle(item, *worked)
            msg, settlement = worked[0], worked[3]
            self.report.batches.add(msg.header.batch_id)
            await self.chunks.tolerance(msg.header, settlement.record)

    with scoped(HeldMessages, "_process", admitted):
        yield


MUTANTS = [
    Mutant("held-admitted-past-budget", "45ebe73 (found here)", "a chunk that gets its place after its session's "
           "budget is spent is still admitted, and discarded there if its batch ended: a page of a cancelled batch's "
           "chunks is settled one after another past the budget", _held_admitted_past_budget, family="lifecycle",
           expect=OVERRUN, seeds=800,
           invariant="a drain session, a replay step's too, ends within DRAIN_BUDGET_S + 60 s (`sim.sessions`)"),
]  # fmt: skip
