"""The `history` family: costs a caller controls, at the scale of a week of history, and the cancel bound while
the ended markers' listings answer late (issue 36 items 8 and 9).

- storage holds the ended markers a week of cancels left (`Scenario.history`), listed in pages of
  `Scenario.list_page` (standing for Azure's 5,000: see `sim.checks.costs`);
- dozens of small batches, most cancelled soon after their submit: every cancel, every drainer's look and the
  first look of each process meet that history (`sim.checks.cost_promises`);
- a few big batches of many chunks, read a few results pages of a few lines at a time from some position;
- medium batches cancelled while they run, with the listings of the recent markers (a drainer's look) answered
  seconds late around the cancel: a look begun before the cancel's answer knows nothing of it, and must not be
  taken as fresh once it answered (`sim.checks.invariants.Cancels`: no handler call past the bound).

Its draws come from its own seeded `random.Random`s, as every family's.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timezone

from shared.store import ended
from sim.clock import EPOCH_S
from sim.scenario import Scenario, Span, Submit

Draw = Callable[..., list[Submit]]

HISTORY = (700, 1100, 1600)  # ended markers of the last week (and a little more) in storage before the run
LIST_PAGE = 20  # a listing page here: 1,100 markers cost what 275,000 cost in Azure's pages of 5,000
SMALL = (1, 2, 3, 5)
MEDIUM = (20, 30, 40)
BIG = (60, 100, 150)


def recent(at_s: float) -> str:
    """A listing of the ten minutes' bucket of markers written at `at_s` (virtual s): a drainer's look, not the
    cancel's prune of the bucket aged past KEEP_S."""
    return f"blob LIST {ended.PREFIX}{ended.bucket(datetime.fromtimestamp(EPOCH_S + at_s, timezone.utc))}/"


def history(scenario: Scenario, rng: random.Random, instances: int, submits: Draw) -> None:
    """`submits` is `sim.families.submits` (which imports this module)."""
    if instances == 1:  # a cancel answered by one process, its batch drained by another
        scenario.skews_s += (rng.uniform(-3.0, 3.0) if scenario.faults else 0.0,)
        instances = 2
    scenario.history = rng.choice(HISTORY)
    scenario.list_page = LIST_PAGE
    seed = scenario.seed
    small = submits(rng, seed, instances, rng.randint(12, 30), at=(0.0, 90.0), tenants=["", "a", "b"],
                    modes=("ok", "ok", "ok", "t1"), lifecycle=False, sizes=SMALL)  # fmt: skip
    medium = submits(rng, seed, instances, rng.randint(2, 4), at=(0.0, 60.0), tenants=["", "a"], modes=("ok",),
                     lifecycle=False, sizes=MEDIUM, first=len(small))  # fmt: skip
    big = submits(rng, seed, instances, rng.randint(1, 2), at=(0.0, 20.0), tenants=["", "b"], modes=("ok", "ok", "t1"),
                  lifecycle=False, sizes=BIG, first=len(small) + len(medium))  # fmt: skip
    scenario.submits = small + medium + big
    scenario.handler_s = rng.choice([(0.05, 0.3), (0.2, 1.0)])
    for sub in small:
        if rng.random() < 0.7:
            scenario.api_cancels.append((round(sub.at_s + rng.uniform(0.2, 6.0), 3), sub.label))
    running = [(round(sub.at_s + rng.uniform(1.0, 8.0), 3), sub.label) for sub in medium]
    scenario.api_cancels += running
    scenario.cancel_on = {label: rng.randrange(instances) for _, label in running}  # not always the drainer's
    for sub in big:
        for _ in range(rng.randint(1, 3)):
            position = rng.choice([0, rng.randrange(sub.items)])
            scenario.exports.append((round(sub.at_s + 30.0, 3), sub.label, rng.choice([1, 2, 5, 10]), position,
                                     rng.randint(2, 4)))  # fmt: skip
    if scenario.faults:
        rate = rng.choice([0.5, 1.0])
        for at, _ in running:  # the looks answer late around the cancel: begun before its answer, done after it
            begins = max(0.0, at - rng.uniform(0.0, 4.0))
            ends = at + rng.uniform(4.0, 12.0)
            for bucket in sorted({recent(begins), recent(ends)}):
                scenario.storage_spans.append(Span(round(begins, 3), round(ends, 3), "late", rate, bucket))
