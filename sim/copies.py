"""The `copies` scenario family (`sim.families.draw` dispatches to it): chunk messages put twice and both copies
handled, retried and parked at once (issue 37, the replay family's seed 420).

A PutMessage whose answer is lost is sent again by the storage SDK, so a chunk can have two messages. Each copy
has its own dequeue count, and each retry rewrites a copy as the chunk's next generation, so the copies walk
their generations apart: handled at once, they record one generation twice with different outcomes (an item's
first call fails, the other copy's succeeds), and a later generation of one copy may hold items the other copy's
counted record settled, or left retrying. The status route, the list and finalize must count such a chunk as the
export lists it (`shared.store.result_store.list_counted`, `shared.batch.results.item_outcomes`), and a batch must
not be counted done while an item's retry is still to run.

So: one or two batches of items that fail their first one to three calls (and some for good), several handler
calls of a chunk at once, few attempts, and for the first seconds a share of the work queues' PutMessages answered
lost (applied, then sent again). Its draws come from a generator of its own; no other family's draws change.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from sim.scenario import Scenario, Span

Draw = Callable[..., Any]  # `sim.families.submits` (which imports this module)

MODES = ("ok", "t1", "t1", "t2", "t3", "perm")
SIZES = (5, 9, 17)
COPIED_FOR_S = 15.0  # the submits come within the first 10 s
PUTS = "queue POST work"  # every PutMessage to a work queue or lane (`sim.storage.transport._operation_name`)


def copies(scenario: Scenario, rng: random.Random, instances: int, submits: Draw) -> None:
    """`submits` is `sim.families.submits`; the batches have no lifecycle options."""
    scenario.submits = submits(rng, scenario.seed, instances, rng.randint(1, 2), at=(0.0, 10.0), tenants=["", "a"],
                               modes=MODES, lifecycle=False, sizes=SIZES)  # fmt: skip
    scenario.settings |= {
        "CHUNK_MAX_ITEMS": str(rng.randint(3, 6)),
        "CHUNK_CONCURRENCY": str(rng.randint(2, 4)),
        "RECEIVE_BATCH": "32",
        "MAX_DEQUEUE_COUNT": str(rng.choice([3, 4])),
        "HANDLER_MAX_IN_FLIGHT": "0",
    }
    scenario.handler_s = rng.choice([(0.05, 0.3), (0.3, 1.0)])
    if scenario.faults:
        scenario.storage_spans.append(Span(0.0, COPIED_FOR_S, "lost", rng.choice([0.3, 0.6]), PUTS))
