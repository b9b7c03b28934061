"""A drainer's counts of its claim on HANDLER_MAX_IN_FLIGHT one at a time, caught by the promise that handler calls
in flight never exceed the limit (`sim.sessions`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from shared.engine.limits import HandlerLimits
from sim.mutants.base import Mutant, scoped


@contextmanager
def _counts_overlap() -> Iterator[None]:
    """ec46cfc reverted: a count starts while the drainer's previous one is still under way, so a count that storage
    answers late can end after a later count lowered the claim, and take the place back from what it read."""
    count = HandlerLimits.count

    async def overlapping(self: HandlerLimits) -> None:
        self._counting = False  # as if no count of this drainer were under way
        await count(self)

    with scoped(HandlerLimits, "count", overlapping):
        yield


MUTANTS = [
    Mutant("counts-overlap", "ec46cfc (found here)", "a drainer's count starts while its previous one is under way: "
           "a count that storage answers late ends after a later one gave its place up, and takes it back from what it "
           "read without a write", _counts_overlap, family="limits", expect="handler calls in flight",
           seeds=130, invariant="handler calls in flight never above `HANDLER_MAX_IN_FLIGHT`",
           why="found by limits seed 119 (the churn, the allocation blob answered late); 3386e7b moved that seed, and "
           "since 0aba105 a count reads the allocation before it lists the leases, so a late read sees the later "
           "counts' writes: only a listing answered late can now take a place back (tests/app/test_limit_claims.py "
           "holds the listing to show it); 130 limits seeds do not catch it; plan: the churn's storage answering "
           "lease listings late"),
]  # fmt: skip
