"""A mutant (a defect put back as a patch of today's code, in this process only) and the tools its patches use."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

SEEDS = 300  # a mutant's seed budget unless it names its own (a slow family) or --seeds says


@dataclass(frozen=True)
class Mutant:
    name: str
    fixed_by: str  # the commit or issue item that fixed it
    defect: str
    patch: Callable[[], AbstractContextManager[None]]
    family: str = "random"  # the scenario family that aims at it (sim.scenario)
    expect: str = ""  # only a violation containing this counts (the invariant that guards against the defect)
    seeds: int = SEEDS  # how many seeds to try before listing it as not caught
    invariant: str = ""  # the invariant that guards against it, as the revert table names it
    why: str = ""  # why the world cannot catch it, and the plan (the table's "not caught" rows)

    @property
    def invented(self) -> bool:
        """A defect of our making (no fix to revert): it shows an invariant can fail."""
        return self.fixed_by.startswith("none")


def swap(owner: Any, name: str, value: Any) -> Iterator[None]:
    """`owner.name` is `value` for the length of the block; then what it was (a class's own descriptor, not the
    bound method `getattr` would give; an inherited attribute is deleted again)."""
    own = vars(owner)
    had, old = name in own, own.get(name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if had:
            setattr(owner, name, old)
        else:
            delattr(owner, name)


@contextmanager
def scoped(module: Any, name: str, value: Any) -> Iterator[None]:
    yield from swap(module, name, value)


class Unmatched(Exception):
    """Matches nothing: an `except` clause given it is as if it were not there."""
