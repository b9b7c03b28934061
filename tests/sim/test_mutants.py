"""The revert table cannot rot silently: a few of its defects, each put back (`sim.mutants`) and run on the seed
that caught it, still fail by the invariant that caught it, and today's code passes those seeds. The whole table
is `python -m sim.mutants` (RELIABILITY.md, "The simulation")."""

from __future__ import annotations

from typing import Any

import pytest

from shared.core.lanes import LaneOrder
from shared.engine import drainer, lane_watch, wakeups
from shared.engine.drainer import Drainer
from shared.engine.fair_slots import FairSlots
from shared.engine.held import HeldMessages
from shared.engine.limits import HandlerLimits
from shared.engine.wakeups import Wakeups
from shared.intake import submit
from shared.ops import lifecycle, progress, status
from shared.watch import fallback, lookout
from sim.mutants import MUTANTS, Mutant
from sim.world import run
from tests.sim.test_seeds import FAULTY_SEEDS, LIMITS_SEEDS, PRIORITY_SEEDS, STORAGE_SEEDS, SUBMIT_SEEDS

# (mutant, the seed of its family that caught it): the table's figures, kept to the fast ones.
CAUGHT = [
    ("high-burst-unbounded", 1),  # priority: HIGH_BURST x RECEIVE_BATCH high starts in a row
    ("list-counts-raw", 97),  # random: the batch list against the status route
    ("export-line-per-record", 97),  # random: the export against the status route
    ("ended-marker-goes-at-last-record", 59),  # random: cancels
    ("keyed-retry-rings-nothing", 23),  # submit: a look after a 202
    ("no-look-chain", 2),  # storage: the look bound
    ("receive-without-share", 6),  # limits: no receive without a share of HANDLER_MAX_IN_FLIGHT
    ("sub-resolution-wait", 23),  # limits: virtual time stops (the spin 1f3838f fixed)
]
BY_NAME = {m.name: m for m in MUTANTS}


@pytest.mark.parametrize(("name", "seed"), CAUGHT)
def test_a_defect_put_back_fails_its_seed_by_the_invariant_that_caught_it(name: str, seed: int) -> None:
    mutant = BY_NAME[name]
    with mutant.patch():
        outcome = run(seed, family=mutant.family)
    assert any(mutant.expect in v for v in outcome.violations), outcome.report()


# Those seeds that the fixed set (test_seeds.py) does not run already.
FIXED = {("random", s) for s in FAULTY_SEEDS} | {("submit", s) for s in SUBMIT_SEEDS}
FIXED |= {("limits", s) for s in LIMITS_SEEDS} | {("storage", s) for s in STORAGE_SEEDS}
FIXED |= {("priority", s) for s in PRIORITY_SEEDS}
BASELINES = sorted({(BY_NAME[name].family, seed) for name, seed in CAUGHT} - FIXED)


@pytest.mark.parametrize(("family", "seed"), BASELINES)
def test_today_s_code_passes_those_seeds(family: str, seed: int) -> None:
    outcome = run(seed, family=family)
    assert outcome.ok, outcome.report()


def _attributes() -> dict[tuple[str, str], Any]:
    owners: list[Any] = [drainer, Drainer, HeldMessages, LaneOrder, FairSlots, HandlerLimits, wakeups, Wakeups, submit,
                         progress, status, lifecycle, lookout, lookout.Chain, fallback, lane_watch]  # fmt: skip
    return {(repr(owner), name): value for owner in owners for name, value in vars(owner).items()}


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_a_mutant_leaves_the_app_as_it_found_it(mutant: Mutant) -> None:
    before = _attributes()
    with mutant.patch():
        pass
    after = _attributes()
    assert after.keys() == before.keys()
    assert [k for k in before if after[k] is not before[k]] == []


def test_every_mutant_is_named_once_and_aims_at_a_known_family() -> None:
    from sim.scenario import FAMILIES

    assert len(BY_NAME) == len(MUTANTS)
    assert all(m.family in FAMILIES for m in MUTANTS)
