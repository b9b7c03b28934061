"""A replay killed between its claim and its send (and, `claim-kept-at-set-aside`, its claim on a chunk whose batch
is cancelled afterwards), left for a later replay of the same chunk that never comes:
caught by the stranded-replay check (`sim.checks.replays`) and the run's liveness, in the `lifecycle` family's notice
drill (lifecycle seed 606: the drill killed the replay's process while storage refused its send)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from shared.batch import envelope
from shared.ops import replay_marks, replay_takeover
from shared.services import Services
from sim.checks.replays import STRANDED
from sim.mutants.base import Mutant, scoped


@contextmanager
def _dead_replay_left_to_a_replay() -> Iterator[None]:
    """The fix reverted: the timer takes no replay's claim over (the notes are still written and deleted)."""

    async def nothing(services: Services) -> int:
        return 0

    with scoped(replay_takeover, "take_over", nothing):
        yield


@contextmanager
def _claim_kept_at_set_aside() -> Iterator[None]:
    """dee0600 reverted: setting aside a parked chunk of an ended batch leaves a dead replay's claim on its items."""

    async def nothing(services: Services, header: envelope.ChunkHeader) -> None:
        return None

    with scoped(replay_marks, "give_back", nothing):
        yield


MUTANTS = [
    Mutant("dead-replay-left-to-a-replay", "5e49157", "a replay killed between its claim and "
           "its send leaves its chunk's items retrying and the chunk parked until another replay of it comes; with "
           "none, its batch is `processing` for good", _dead_replay_left_to_a_replay, family="lifecycle",
           expect=STRANDED, invariant="a replayed chunk is never stranded (`sim.checks.replays`)", seeds=700),
    Mutant("claim-kept-at-set-aside", "dee0600", "a parked chunk of a batch cancelled after a dead replay's claim is "
           "set aside with the claim left on its items: nothing carries them, and the batch is `cancelling` for good",
           _claim_kept_at_set_aside, family="lifecycle", expect=STRANDED,
           invariant="a replayed chunk is never stranded (`sim.checks.replays`)", seeds=700),
]  # fmt: skip
