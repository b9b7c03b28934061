"""A drainer's claim on HANDLER_MAX_IN_FLIGHT lowered only once its write answers, caught by the promise that
handler calls in flight never exceed the limit (`sim.sessions`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from shared.engine import limits
from shared.engine.limits import Claim, HandlerLimits
from shared.store.storage import write_json as write_json_stored
from sim.mutants.base import Mutant, scoped

_COUNTING: ContextVar[tuple[HandlerLimits, Claim] | None] = ContextVar("claims_counting", default=None)


@contextmanager
def _claim_lowered_after_write() -> Iterator[None]:
    """612b9cc reverted: during a count's write of a lower claim, the drainer still admits chunks under its old
    claim (the claim it held as the count began), while the write hands that room to another drainer."""
    count = HandlerLimits._count

    async def counting(self: HandlerLimits) -> None:
        token = _COUNTING.set((self, self.claim))
        try:
            await count(self)
        finally:
            _COUNTING.reset(token)

    async def write_json(*args: Any, **kwargs: Any) -> str:
        held = _COUNTING.get()
        if held is not None:
            drainer, before = held
            drainer.claim = before
        return await write_json_stored(*args, **kwargs)

    with scoped(HandlerLimits, "_count", counting), scoped(limits, "write_json", write_json):
        yield


MUTANTS = [
    Mutant("claim-lowered-after-write", "612b9cc (found here)", "a count lowers its drainer's claim only once the "
           "write answers: a chunk admitted meanwhile runs in the room the write gives another drainer",
           _claim_lowered_after_write, family="limits", expect="handler calls in flight", seeds=100,
           invariant="handler calls in flight never above `HANDLER_MAX_IN_FLIGHT`",
           why="caught by limits seed 15 (the churn) from cf77bf1 to ec46cfc; 3386e7b (a session gives its claim back "
           "for at most 3 s) moved that seed's late releases, and 100 limits seeds no longer catch it; plan: a longer "
           "hunt of the churn, after checking whether ec46cfc (one count per drainer at a time) left any way for a "
           "chunk to be admitted while its drainer's lowering write is under way"),
]  # fmt: skip
