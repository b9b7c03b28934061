"""The `straddle` scenario family (`sim.families.draw` dispatches to it): replays of everything that straddle their
batch's final stamp (issue 37, the replay family's seed 787).

A replay call judges each batch it meets once, and walks its parked chunks for up to its 60 s window, longer
while the poison index answers late. A batch whose last live chunk parks in that window, with the chunks the
call put back already settled, is final by its records: a drain's finalize (or a status read) stamps it
`completed_with_failures`, and the call then meets another parked chunk of it. Claimed and put back, that
chunk's items succeed and the status route says `completed` under the stamp; the claim's fence
(`shared.store.claim_fence`) sends it aside instead. The replay family met this in one seed of a thousand.

So: one batch whose every chunk parks (each item fails its first six calls; MAX_DEQUEUE_COUNT 3 to 5) over a
few minutes, one chunk handled at a time, a second small batch beside it, the operator replaying everything
every 10-40 s from before the first park until after the last, what a replay reads and deletes of the poison
index answering 1-8 s late all along, and the batch's status polled (each poll of a batch final by its
records stamps it). Its draws come from a generator of its own; no other family's draws change.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sim.doors.replay_time import SLOW_OPS
from sim.heard import heard
from sim.scenario import ReplayCall, Scenario, Span, Submit

Draw = Callable[..., Any]  # `sim.families.submits` (which imports this module)
World = Any  # `sim.world.World` (it imports this module)

CALLS_FROM_S = (15.0, 40.0)  # the first replay of everything
CALLS_UNTIL_S = 480.0  # the last one begins before this
CALL_GAP_S = (5.0, 20.0)  # between one call's answer being due and the next (calls are made one at a time)
FENCED = "since this replay judged it"  # what `shared.ops.replay` warns of a chunk its claim's fence sent aside


def straddle(scenario: Scenario, rng: random.Random, instances: int, submits: Draw) -> None:
    """`submits` is `sim.families.submits` (the small batch beside the backlog)."""
    items = rng.randint(12, 36)
    scenario.submits = [Submit(round(rng.uniform(1.0, 10.0), 3), 0, "backlog", items, "a", "normal", None, 0,
                               ("t6",) * items)]  # fmt: skip
    scenario.submits += submits(rng, scenario.seed, instances, 1, at=(0.0, 30.0), tenants=["b"],
                                modes=("ok", "ok", "t1", "t6"), lifecycle=False, first=1)  # fmt: skip
    scenario.settings |= {
        "TENANT_FROM": "principal",
        "CHUNK_MAX_ITEMS": str(rng.choice([2, 3, 4])),
        "CHUNK_CONCURRENCY": "1",
        "MAX_DEQUEUE_COUNT": str(rng.randint(3, 5)),
        "WORK_QUEUE_PARTITIONS": "1",
    }
    scenario.handler_s = rng.choice([(0.5, 2.0), (1.0, 4.0)])
    at = rng.uniform(*CALLS_FROM_S)
    while at < CALLS_UNTIL_S:
        scenario.replay_calls.append(ReplayCall(round(at, 3), "operator", "all"))
        at += rng.uniform(*CALL_GAP_S)
    first, last = scenario.replay_calls[0].at_s, scenario.replay_calls[-1].at_s
    for op in SLOW_OPS:
        scenario.storage_spans.append(Span(first - 1.0, last + 90.0, "slow", 1.0, op))
    scenario.polls.append(("backlog", float(rng.choice([5, 10])), 60))
    if scenario.faults and rng.random() < 0.5:
        scenario.add_faults(rng, instances)  # within the first 80 s (crashes down for up to a minute)


@contextmanager
def fences_heard(world: World) -> Iterator[None]:
    """For one run, in every family: a replay's fence that met a stamp is the `fenced` feature."""
    with heard("shared.ops.replay", logging.WARNING, _Fenced(world)):
        yield


class _Fenced(logging.Handler):
    def __init__(self, world: World) -> None:
        super().__init__(logging.WARNING)
        self.world = world

    def emit(self, record: logging.LogRecord) -> None:
        if FENCED in str(record.msg):
            self.world.features.add("fenced")
