"""A replay's takeover that reads another lineage as the parked chunk's carrier, caught by the promise that a
replayed chunk is never stranded (`sim.checks.replays.never_stranded`, which keys the carrier as the app does)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from shared.batch import envelope
from shared.ops import replay_marks
from sim.checks.replays import STRANDED
from sim.mutants.base import Mutant, swap


class _Generation(tuple[int, int, int]):
    """A lineage key equal to any key of its chunk and generation, whatever the first position (a key's `==`
    defers to this subclass's)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, tuple) and tuple(other[:2]) == tuple(self[:2])

    def __hash__(self) -> int:
        return hash(tuple(self[:2]))


@contextmanager
def _carrier_any_of_the_generation() -> Iterator[None]:
    """5834ef5 reverted (issue 36 item 1, its second half): any record of the chunk's next generation reads as the
    parked chunk's carrier. The follow-up of the chunk's items retrying after a transient failure is of that
    generation too, so a replay taking over a dead replay's claim finds it "carried", answers settled and deletes
    the parked copy as stale: its items stay `retrying` for good."""

    def carrier(header: envelope.ChunkHeader) -> Any:
        return _Generation((header.chunk, header.gen, min(header.positions or [0])))

    yield from swap(replay_marks, "carrier", carrier)


MUTANTS = [
    Mutant("carrier-any-of-the-generation", "5834ef5 (issue 36 item 1)", "a replay's takeover reads any record of "
           "the next generation (a transient follow-up's) as the parked chunk's carrier",
           _carrier_any_of_the_generation, family="lifecycle", expect=STRANDED,
           invariant="a replayed chunk is never stranded (`sim.checks.replays`)",
           why="caught by lifecycle seed 270 until c67e0de: a recorded chunk that comes back is no longer run again, "
           "so that seed's batches are final before its replay at 176 s, which sets their chunks aside instead of "
           "taking one over; 300 lifecycle seeds find no other; plan: a replay scenario that takes over a parked chunk "
           "of a batch still open while a transient follow-up of the next generation is recorded"),
]  # fmt: skip
