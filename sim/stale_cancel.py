"""The `stale-cancel` scenario family (`sim.families.draw` dispatches to it): a cancel whose read of its batch is
stale by the time it ends it, while clients poll the batch's status (issue 37, lifecycle seed 601).

A cancel reads its batch (the manifest, then a listing of its results), finds it running, and ends it over the
manifest's ETag a few requests later. When its listing is answered seconds late (a slow connection: storage's
"late" fault, served at once and answered 5-15 s after), the batch's last record can land in between, and so can a
client's status read: the batch is final by its records and not yet stamped while the cancel still means to end
it. The status route must not answer a final status the cancel then overturns (3625368: the route stamps the
batch first, over the same ETag, then answers); `sim.checks.answered_final` holds every answer a caller had to
the first final one, and to the stamp.

So: a small batch whose handler calls take a second or so, polled every 0.5-2 s to its end, most often cancelled
some seconds into its run, and a share of the listings of its results answered late for the first two minutes. Its
draws come from a generator of its own; no other family's draws change.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sim.scenario import Scenario, Span

Draw = Callable[..., Any]  # `sim.families.submits` (which imports this module)

MODES = ("ok", "ok", "ok", "t1")  # t1: one retry, so a batch's last record may come some seconds after the rest
SIZES = (9, 17, 30)
LATE_FOR_S = 120.0  # listings answered late from the start for this long (the batches run within it)
# A listing of one batch's results names its id as its prefix (`shared.core.layout.results_prefix`): 32 hex digits.
# "blob LIST e" would take in the ended markers' listings too ("ended/"), so it is split by the second digit.
HEX = "0123456789abcdef"
RESULTS_LISTINGS = tuple(f"blob LIST {d}" for d in HEX if d != "e") + tuple(f"blob LIST e{d}" for d in HEX)


def stale_cancel(scenario: Scenario, rng: random.Random, instances: int, submits: Draw) -> None:
    """`submits` is `sim.families.submits`; the batches have no lifecycle options (an expiry or a tolerance would
    end some of them otherwise than by their cancel)."""
    # One batch. A first draw had 2-4 batches and cancels 1-40 s in: a drain's finalize of each batch it touched
    # waited out that batch's late listing, one after another past the drain's budget (its seeds 26 and 45: 93 s
    # and 74 s for bounds of 90 s and 70 s); `shared.ops.lifecycle.finalize_all` is now held to FINALIZE_S in all.
    scenario.submits = submits(rng, scenario.seed, instances, 1, at=(0.0, 10.0), tenants=["", "a"], modes=MODES,
                               lifecycle=False, sizes=SIZES)  # fmt: skip
    # Half the batches name a callback (a generator of its own: the draws above and below stand): finalize stores
    # the notice only once its stamp won, so a cancel's end in the window cannot leave a `completed` notice on a
    # batch stamped `cancelled` (`notice-before-stamp`).
    own = random.Random(f"stale-cancel-callbacks-{scenario.seed}")
    scenario.submits = [replace(sub, callback=own.random() < 0.5) for sub in scenario.submits]
    scenario.handler_s = rng.choice([(0.3, 1.0), (1.0, 3.0)])  # batches that run for some seconds
    for sub in scenario.submits:
        scenario.polls.append((sub.label, rng.choice([0.5, 1.0, 2.0]), 400))
        if rng.random() < 0.8:
            scenario.api_cancels.append((round(sub.at_s + rng.uniform(0.5, 8.0), 3), sub.label))
    if scenario.faults:  # the listings of a batch's results: a cancel's read, a status read, a finalize's
        rate = rng.choice([0.6, 1.0])
        scenario.storage_spans += [Span(0.0, LATE_FOR_S, "late", rate, op) for op in RESULTS_LISTINGS]
