"""A chunk whose handler call hangs at every delivery (issue 37): in a third of the `limits` seeds, drawn apart
(`random.Random(f"{seed}-stuck")`, so every other draw of the family stays as it was), the first chunk of one
submit hangs until `functionTimeout` each time it is handled, as a handler stuck on one input would.

Each hang is a fault (`World.hangs`: the process restarts, the chunk comes back after its visibility timeout,
nothing recorded). The app parks the chunk unrun once a copy of its message was delivered `MAX_DEQUEUE_COUNT` + 1
times with no outcome (`shared.batch.settlement.unanswered`): no handler call comes at a later attempt
(`handed_past_last_attempt`, checked at every call), and the batch becomes final within the run's bound after the
last fault (`sim.world.World.drive`; the final checks: no batch left with items pending). Without that it is
delivered again every round, forever: a function's time each round, the batch never final. A hang at an attempt
past that is the app's fault, not the world's: it moves no bound (`a_fault`). A lost answer to a send can leave two
or three copies of the chunk's message, each delivered its own MAX_DEQUEUE_COUNT + 1 times (limits seed 341), so
these seeds' runs may last hours past the last fault (`STUCK_RUN_S`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from shared.handlers import ChunkContext

SHARE = 1 / 3  # of the family's seeds
STUCK_RUN_S = 4 * 3600.0  # what a stuck seed's run may last beyond the others' (`sim.world._bounded`)

# The world (`sim.world.World`) and its scenario are passed in, not imported: they import this module.
World = Any


def aim(scenario: Any) -> None:
    """In a third of the seeds, one submit's first chunk hangs at every call (`Scenario.stuck`, its label)."""
    rng = random.Random(f"{scenario.seed}-stuck")
    if scenario.submits and rng.random() < SHARE:
        scenario.stuck = rng.choice(scenario.submits).label


def always(world: World, items: Sequence[Any], context: ChunkContext) -> bool:
    """Whether this call is the stuck chunk's (items carry their submit's label, `b`)."""
    label = world.scenario.stuck
    return label is not None and context.chunk == 0 and bool(items) and items[0].get("b") == label


def past_last_attempt(world: World, context: ChunkContext) -> bool:
    """Whether this call comes at an attempt the app promises never to hand to the handler: past
    `MAX_DEQUEUE_COUNT` + 1 (`shared.batch.settlement.past_last_attempt`)."""
    return bool(context.attempt > world.settings.max_dequeue_count + 1)


def handed_past_last_attempt(world: World, context: ChunkContext) -> None:
    """The promise, checked at every handler call (`sim.sessions.Sessions.on_handler_start`)."""
    if past_last_attempt(world, context):
        world.violate(
            f"handler called for {context.batch_id[:8]}/{context.chunk} at attempt {context.attempt}, past "
            f"MAX_DEQUEUE_COUNT + 1 ({world.settings.max_dequeue_count + 1})"
        )


def a_fault(world: World, context: ChunkContext, *, always: bool) -> bool:
    """Whether a hang is one of the world's faults: a drawn one, or the stuck chunk's up to its last attempt."""
    return not always or not past_last_attempt(world, context)
