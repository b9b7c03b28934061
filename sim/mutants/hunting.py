"""Hunting a mutant's seeds: `try_seed` runs one seed with a mutant in place (and without it, if it failed), `hunt`
tries seeds in order until one catches it, and `hunts` runs many rows' hunts with their seeds in parallel
processes (`sim.pool`), finding for each what `hunt` finds."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from sim.mutants import MUTANTS
from sim.mutants.base import Mutant
from sim.pool import ordered
from sim.world import run

BY_NAME = {mutant.name: mutant for mutant in MUTANTS}


@dataclass(frozen=True)
class Tried:
    """One seed run with a mutant in place (and, if it failed, without)."""

    kind: str  # "passes", "same" (fails as today's code fails it), "caught" (by `expect`) or "otherwise"
    violation: str = ""  # the catching violation, or the first of a seed that failed otherwise
    others: int = 0  # the mutant's other new violations on a catching seed
    baseline_ok: bool = True  # today's code passes the seed (known only if the mutant's run failed)


@dataclass
class Hunt:
    seed: int | None = None  # the first seed that caught it
    violation: str = ""
    tried: int = 0
    otherwise: list[tuple[int, str]] = field(default_factory=list)  # seeds that failed, but not by `expect`
    others: int = 0  # the mutant's other new violations on the catching seed
    baseline_ok: bool = True  # today's code passes the catching seed

    def add(self, seed: int, tried: Tried) -> bool:
        """Count one more seed; whether it caught the mutant (the hunt ends there)."""
        self.tried += 1
        if tried.kind == "caught":
            self.seed, self.violation = seed, tried.violation
            self.others, self.baseline_ok = tried.others, tried.baseline_ok
            return True
        if tried.kind == "otherwise":
            self.otherwise.append((seed, tried.violation))
        return False


def try_seed(mutant: Mutant, seed: int, family: str) -> Tried:
    """Whether `seed` fails with `mutant` in place, and not the same way without it (a seed that fails on today's
    code too counts only if the mutant changes what breaks). With `mutant.expect`, only a violation naming it
    counts: a changed schedule can expose a defect of today's code elsewhere (random seed 423 fails the held bound
    without any mutant), which is not this defect caught."""
    with mutant.patch():
        outcome = run(seed, family=family)
    if outcome.ok:
        return Tried("passes")
    baseline = run(seed, family=family)
    if baseline.violations == outcome.violations:
        return Tried("same", baseline_ok=baseline.ok)
    new = [v for v in outcome.violations if v not in baseline.violations]
    hits = [v for v in new if mutant.expect in v]
    if hits:
        return Tried("caught", hits[0], len([v for v in new if mutant.expect not in v]), baseline.ok)
    return Tried("otherwise", outcome.violations[0], baseline_ok=baseline.ok)


def hunt(mutant: Mutant, seeds: range, family: str | None = None) -> Hunt:
    """The first seed in `seeds` that catches `mutant` (`try_seed`), in this process."""
    found = Hunt()
    for seed in seeds:
        if found.add(seed, try_seed(mutant, seed, family or mutant.family)):
            break
    return found


@dataclass(frozen=True)
class Row:
    """A mutant's hunt: its seeds in the order to try them, the first that catches it ends it."""

    mutant: Mutant
    family: str
    seeds: list[int]


def hunts(rows: list[Row], jobs: int) -> Iterator[tuple[Row, Hunt, float, float]]:
    """Each row's hunt as it ends, in row order: (row, hunt, its CPU seconds, wall seconds since the previous row
    ended). The seeds run in `jobs` processes (`sim.pool`), a row's next seeds beside its first ones and the next
    rows' beside its last ones; a seed begun past the one that caught its row is wasted, never counted, so each
    hunt finds what `hunt` finds."""
    ended: set[int] = set()

    def tasks() -> Iterator[tuple[int, str, str, int]]:
        for number, row in enumerate(rows):
            for seed in row.seeds:
                if number in ended:
                    break
                yield number, row.mutant.name, row.family, seed

    found = [Hunt() for _ in rows]
    cpu_s = [0.0 for _ in rows]
    began = time.perf_counter()
    for (number, _, _, seed), timed in ordered(tasks(), _try_task, jobs):
        if number in ended:
            continue
        cpu_s[number] += timed.cpu_s
        if found[number].add(seed, timed.value) or found[number].tried == len(rows[number].seeds):
            ended.add(number)
            now = time.perf_counter()
            yield rows[number], found[number], cpu_s[number], now - began
            began = now
            if len(ended) == len(rows):
                return  # the seeds still running are past their rows' catches: stop them


def _try_task(task: tuple[int, str, str, int]) -> Tried:
    _, name, family, seed = task
    return try_seed(BY_NAME[name], seed, family)
