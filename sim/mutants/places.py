"""A sync handler's call that gives its place in HANDLER_MAX_IN_FLIGHT back before its thread returns, caught by the
promise that handler calls in flight never exceed the limit (`sim.sessions`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from shared.engine import sync_calls
from shared.engine.handler_calls import HandlerCalls
from shared.engine.limits import HandlerLimits
from shared.store.leases import DrainLease
from sim.mutants.base import Mutant, scoped


@contextmanager
def _sync_place_given_back() -> Iterator[None]:
    """ad38ba4 reverted: a chunk's task cancelled while it awaits its sync call's thread (a failed visibility
    extension) gives the call's place back at once, and its session gives its claim and its lease back without
    waiting for the thread: the drainer admits the next chunk into the place, or the next holder takes the room."""

    async def given_back(self: HandlerCalls, fn: Callable[[], Any], ready: Callable[[], bool],
                         limits: HandlerLimits | None) -> Any:  # fmt: skip
        self.sync_calls += 1
        try:
            return await sync_calls.start(fn, ready)
        finally:
            self.sync_calls -= 1

    async def at_once(self: HandlerCalls, lease: DrainLease) -> bool:
        return True

    with scoped(HandlerCalls, "on_thread", given_back), scoped(HandlerCalls, "returned", at_once):
        yield


MUTANTS = [
    Mutant("sync-place-given-back", "ad38ba4 (found here)", "a chunk given up while its sync handler call's thread "
           "runs (a failed visibility extension) gives the call's place back, and its session its claim and lease: "
           "the next chunk is admitted beside the running thread", _sync_place_given_back, family="replay",
           seeds=700, expect="handler calls in flight",
           invariant="handler calls in flight never above `HANDLER_MAX_IN_FLIGHT`"),
]  # fmt: skip
