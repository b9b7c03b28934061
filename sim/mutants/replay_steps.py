"""A background replay step that writes its job only at its end (fixed by 8d437f4, `shared.ops.replay_journal`):
a step killed mid-step leaves the chunks it sent back or set aside counted by no one, caught in the `replay`
family, whose killed steps (`sim.doors.replay_time.kill_steps`) reach it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from shared.ops import replay_journal
from sim.doors.replay_time import LOST
from sim.mutants.base import Mutant, swap


@contextmanager
def _progress_at_step_end() -> Iterator[None]:
    """8d437f4 reverted: a step writes nothing before each group of chunks (no counts so far, no group in hand), so
    its job's progress is written once, at the step's end; a step killed before then took chunks that the next
    step, finding no group in hand, does not count."""

    async def nothing_written(self: replay_journal.Journal, poison_queue: str, message_ids: list[str]) -> None:
        return None

    yield from swap(replay_journal.Journal, "taking", nothing_written)


MUTANTS = [
    Mutant("step-progress-at-its-end", "8d437f4", "a background replay step writes its job's progress only at its "
           "end: a step killed mid-step loses the count of the chunks it took", _progress_at_step_end,
           family="replay", expect=LOST,
           invariant="a background replay job's progress counts every chunk it took (`sim.doors.replay_time`)"),
]  # fmt: skip
