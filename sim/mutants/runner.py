"""The revert table's runner: `python -m sim.mutants [--only NAME[,NAME]] [--seeds N] [--family F]` prints, per
mutant, the first seed of its family that fails with it in place (and not the same way without it) and the
invariant that failed, or that none did within its seed budget."""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field

from sim.mutants import MUTANTS
from sim.mutants import __doc__ as TABLE_DOC
from sim.mutants.base import SEEDS, Mutant
from sim.world import run


@dataclass
class Hunt:
    seed: int | None = None  # the first seed that caught it
    violation: str = ""
    tried: int = 0
    otherwise: list[tuple[int, str]] = field(default_factory=list)  # seeds that failed, but not by `expect`


def hunt(mutant: Mutant, seeds: range, family: str | None = None) -> Hunt:
    """The first seed in `seeds` on which the simulator fails with `mutant` in place, and not the same way
    without it (a seed that fails on today's code too counts only if the mutant changes what breaks). With
    `mutant.expect`, only a violation naming it counts: a changed schedule can expose a defect of today's code
    elsewhere (random seed 423 fails the held bound without any mutant), which is not this defect caught."""
    found = Hunt()
    for seed in seeds:
        found.tried += 1
        with mutant.patch():
            outcome = run(seed, family=family or mutant.family)
        if outcome.ok:
            continue
        baseline = run(seed, family=family or mutant.family)
        if baseline.violations == outcome.violations:
            continue
        hits = [v for v in outcome.violations if mutant.expect in v and v not in baseline.violations]
        if hits:
            found.seed, found.violation = seed, hits[0]
            return found
        found.otherwise.append((seed, outcome.violations[0]))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.mutants", description=TABLE_DOC)
    parser.add_argument("--seeds", type=int, default=None, help=f"seeds per mutant (default: its own, else {SEEDS})")
    parser.add_argument("--only", default=None, help="one mutant by name (or a comma-separated list)")
    parser.add_argument("--family", default=None, help="this scenario family for every mutant (default: its own)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)
    only = set(args.only.split(",")) if args.only else None
    missed = 0
    for mutant in MUTANTS:
        if only and mutant.name not in only:
            continue
        found = hunt(mutant, range(args.seeds or mutant.seeds), args.family)
        if found.seed is not None:
            outcome = f"caught by seed {found.seed} ({found.seed + 1} seeds): {found.violation}"
        else:
            outcome = f"NOT caught in {found.tried} seeds"
        missed += found.seed is None
        print(f"{mutant.name} [{mutant.fixed_by}] ({args.family or mutant.family}): {outcome}", flush=True)
        for seed, violation in found.otherwise:
            print(f"  seed {seed} failed otherwise (not counted): {violation}", flush=True)
    return 1 if missed else 0
