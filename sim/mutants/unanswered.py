"""A chunk whose handler call hangs at every delivery, handed to the handler again each round past
MAX_DEQUEUE_COUNT + 1, caught by the run's liveness (`sim.world.World.drive`: every chunk message gone within an hour
of the scenario's last fault): the `limits` seeds whose first chunk of a submit hangs at every call (`sim.stuck`)
leave it queued forever, its batch never final."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from shared.engine import held
from sim.mutants.base import Mutant, scoped

PENDING = "chunk message(s) or notice(s) pending"  # what `World.drive` writes of work left an hour after the faults


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
           "final", _hung_chunk_delivered_forever, family="limits", expect=PENDING,
           invariant="every chunk message is gone within an hour of the last fault (`sim.world`)"),
]  # fmt: skip
