"""The `limits` family's churn (`sim.families.draw`), drawn apart so the family's other draws stay as they were: in
half its seeds, drainers join and leave while each runs several chunks at once under HANDLER_MAX_IN_FLIGHT of one
or two.

The work is spread over two or three partitions (a limit of one or two feeds that many drainers a queue, so the
drainers that count each other are mostly the partitions' slot 0), each drainer has two receive loops and several
chunks at once (RECEIVERS, CHUNK_CONCURRENCY), handler calls last seconds (and hang less often than the family's),
more batches come later so the drainers of the partitions that rank first start again while the others work, an
instance dies (its lease lapses), and for a span the allocation blob's reads and writes are answered seconds late.
A drainer's count then moves its claim down (a drainer ranking before it leases again) while a chunk of its other
receive loop comes to be admitted: the room its claim gives up must not still be used by a chunk it admits while
that write is under way (612b9cc), which the promise "no more handler calls in flight than HANDLER_MAX_IN_FLIGHT"
(`sim.sessions`) holds.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from sim.host import STATE
from sim.scenario import MODES, Crash, Scenario, Span, Submit

# The allocation blob's reads and writes (`shared.engine.limits`).
ALLOCATION = (f"blob GET {STATE}/limits/", f"blob PUT {STATE}/limits/")

Submits = Callable[..., list[Submit]]  # `sim.families.submits`


def churn(scenario: Scenario, submits: Submits) -> None:
    """Make `scenario` (a `limits` one, with faults) a churn of drainers, in half the seeds."""
    rng = random.Random(f"{scenario.seed}-claim-churn")
    if rng.random() >= 0.5:
        return
    instances = len(scenario.skews_s)
    scenario.settings |= {
        "WORK_QUEUE_PARTITIONS": str(rng.choice([2, 3])),
        "CHUNK_CONCURRENCY": str(rng.randint(2, 4)),
        "RECEIVE_BATCH": str(rng.choice([1, 2])),
        "RECEIVERS": "2",
        "HANDLER_MAX_IN_FLIGHT": str(rng.choice([1, 1, 2])),
    }
    scenario.handler_s = rng.choice([(1.0, 5.0), (2.0, 8.0)])
    scenario.handler_hang = 0.02  # fewer hangs than the family's 10%: each holds the one place for minutes
    later = submits(rng, scenario.seed, instances, rng.randint(4, 8), at=(40.0, 240.0), tenants=["", "a", "b"],
                    modes=MODES, lifecycle=False, first=len(scenario.submits))  # fmt: skip
    scenario.submits = sorted(scenario.submits + later, key=lambda s: s.at_s)
    start = rng.uniform(0.0, 40.0)
    end = start + rng.uniform(60.0, 150.0)
    for op in ALLOCATION:  # answered seconds late: a count's read and write take a while
        scenario.storage_spans.append(Span(round(start, 3), round(end, 3), "late", 0.5, op))
    scenario.crashes.append(Crash(round(rng.uniform(5.0, 150.0), 3), rng.randrange(instances), rng.uniform(5.0, 40.0)))
    scenario.crashes.sort(key=lambda c: c.at_s)
