"""A fix that cut what an idle app costs, put back, caught by the idle-cost promise (`sim.checks.promises.idle_cost`:
storage transactions an hour over the `idle` family's stretches within the README's budget)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from shared.services import Services
from shared.watch import fallback
from sim.mutants.base import Mutant, swap
from sim.mutants.costs import IDLE


@contextmanager
def _lane_depths_every_tick() -> Iterator[None]:
    """d429839 reverted: the timer's look at a partition is thorough at every tick (every lane's depth read, the
    quiet record trusted for none), not once a day: an idle lane costs a read per tick, not one a day."""
    inspect = vars(fallback)["inspect"]  # the name fallback imported (not re-exported)

    async def thorough(services: Services, queue: str, deadline: float, *, thorough: bool = False) -> Any:
        return await inspect(services, queue, deadline, thorough=True)

    yield from swap(fallback, "inspect", thorough)


MUTANTS = [
    Mutant("lane-depths-every-tick", "d429839", "the timer reads every lane's depth at each tick, not once a day",
           _lane_depths_every_tick, family="idle", expect=IDLE, seeds=30,
           invariant="storage transactions an hour while idle within the README's budget (`sim.checks.promises`)"),
]  # fmt: skip
