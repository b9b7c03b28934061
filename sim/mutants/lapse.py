"""A drainer that lets its lease lapse under its own handler calls, caught by the promise that handler calls in
flight never exceed HANDLER_MAX_IN_FLIGHT (`sim.sessions`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from shared.engine.drainer import Drainer
from shared.store.leases import DrainLease
from sim.mutants.base import Mutant, scoped


@contextmanager
def _calls_outlive_the_lease() -> Iterator[None]:
    """8397b3f reverted: a session whose renewals fail (storage down) keeps its async handler calls running past
    the moment its lease may lapse; the next holder's claim takes the room they hold."""

    async def unguarded(self: Drainer, lease: DrainLease) -> None:
        return None

    with scoped(Drainer, "_before_lapse", unguarded):
        yield


MUTANTS = [
    Mutant("calls-outlive-the-lease", "8397b3f (found here)", "a drainer that cannot renew its lease lets it lapse "
           "while its async handler calls run on: the next holder claims the room they hold and starts calls in it",
           _calls_outlive_the_lease, family="limits", expect="handler calls in flight",
           invariant="handler calls in flight never above `HANDLER_MAX_IN_FLIGHT`",
           why="caught by limits seed 101 (storage down 16 s) until ec46cfc (one count of a drainer at a time) moved "
           "it; 300 limits seeds no longer catch it; plan: find whether seed 101's catch went through overlapping "
           "counts, and hunt a family with storage down under HANDLER_MAX_IN_FLIGHT"),
]  # fmt: skip
