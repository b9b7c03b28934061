"""A chunk whose handler call hangs at every delivery (issue 37): in a third of the `limits` seeds, drawn apart
(`random.Random(f"{seed}-stuck")`, so every other draw of the family stays as it was), the first chunk of one
submit hangs until `functionTimeout` each time it is handled, as a handler stuck on one input would.

Each hang is a fault (`World.hangs`: the process restarts, the chunk comes back after its visibility timeout,
nothing recorded). The app parks the chunk unrun once it was delivered `MAX_DEQUEUE_COUNT` + 1 times with no outcome
(`shared.batch.settlement.unanswered`), so its batch becomes final within the run's bound after the last fault
(`sim.world.World.drive`, and the final checks: no batch left with items pending). Without that it is delivered
again every round, forever: a function's time each round, the batch never final.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from shared.handlers import ChunkContext

SHARE = 1 / 3  # of the family's seeds

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
