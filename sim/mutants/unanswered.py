"""A chunk whose handler call hangs at every delivery, handed to the handler again each round past
MAX_DEQUEUE_COUNT + 1, caught by the promise checked at every handler call that none comes past that attempt
(`sim.stuck.handed_past_last_attempt`); the run's liveness (`sim.world.World.drive`: every chunk message gone within
an hour of the last fault) fails too: the `limits` seeds whose first chunk of a submit hangs at every call
(`sim.stuck`) leave it queued forever, its batch never final."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from shared.engine import held
from sim.mutants.base import Mutant, scoped

PAST = "past MAX_DEQUEUE_COUNT + 1"  # what `sim.stuck.handed_past_last_attempt` writes


@contextmanager
def _hung_chunk_delivered_forever() -> Iterator[None]:
    """The fix reverted: no delivery is past the threshold, so one with no record of its lineage calls the
    handler again, whatever its dequeue count."""

    def never(attempt: int, max_attempts: int) -> bool:
        return False

    with scoped(held, "past_last_attempt", never):
        yield


MUTANTS = [
    Mutant("hung-chunk-delivered-forever", "4fbeb86", "a chunk whose handler call hangs at every delivery is "
           "handed to the handler again each visibility timeout past MAX_DEQUEUE_COUNT + 1, forever, its batch never "
           "final", _hung_chunk_delivered_forever, family="limits", expect=PAST,
           invariant="no handler call past MAX_DEQUEUE_COUNT + 1 attempts (`sim.stuck`)"),
]  # fmt: skip
