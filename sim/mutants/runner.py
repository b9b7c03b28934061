"""The revert table's runner: `python -m sim.mutants [--only NAME[,NAME]] [--seeds N] [--family F]` prints, per
mutant, the first seed of its family that fails with it in place (and not the same way without it) and the
invariant that failed, or that none did within its seed budget. `--json FILE` appends each result to FILE;
`--table` prints the revert table from this run's results (with `--render FILE...`, from saved ones instead), and
`--into RELIABILITY.md` writes it there between its markers (`sim.mutants.table`)."""

from __future__ import annotations

import argparse
import logging
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from sim.mutants import MUTANTS
from sim.mutants.base import SEEDS, Mutant
from sim.mutants.table import Result, load, render, write_into
from sim.world import run


@dataclass
class Hunt:
    seed: int | None = None  # the first seed that caught it
    violation: str = ""
    tried: int = 0
    otherwise: list[tuple[int, str]] = field(default_factory=list)  # seeds that failed, but not by `expect`
    others: int = 0  # the mutant's other new violations on the catching seed


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
        new = [v for v in outcome.violations if v not in baseline.violations]
        hits = [v for v in new if mutant.expect in v]
        if hits:
            found.seed, found.violation = seed, hits[0]
            found.others = len([v for v in new if mutant.expect not in v])
            return found
        found.otherwise.append((seed, outcome.violations[0]))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.mutants", description=__doc__)
    parser.add_argument("--seeds", type=int, default=None, help=f"seeds per mutant (default: its own, else {SEEDS})")
    parser.add_argument("--only", default=None, help="one mutant by name (or a comma-separated list)")
    parser.add_argument("--family", default=None, help="this scenario family for every mutant (default: its own)")
    parser.add_argument("--json", type=Path, default=None, help="append each mutant's result to this file")
    parser.add_argument("--table", action="store_true", help="print the revert table (RELIABILITY.md)")
    parser.add_argument("--render", type=Path, nargs="+", default=None, help="the table from these --json files")
    parser.add_argument("--into", type=Path, default=None, help="write the table into this file's markers")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)
    if args.render:
        return _table(load(args.render), args.into)
    only = set(args.only.split(",")) if args.only else None
    commit = _commit()
    missed = 0
    found: dict[str, Result] = {}
    for mutant in MUTANTS:
        if only and mutant.name not in only:
            continue
        family = args.family or mutant.family
        began = time.perf_counter()
        hunted = hunt(mutant, range(args.seeds or mutant.seeds), args.family)
        took = time.perf_counter() - began
        result = Result(mutant.name, family, hunted.tried, hunted.seed, hunted.violation, hunted.others, commit)
        found[mutant.name] = result
        if args.json is not None:
            with args.json.open("a") as out:
                print(result.line(), file=out)
        if hunted.seed is not None:
            alone = "" if not hunted.others else f", with {hunted.others} other violation(s)"
            outcome = f"caught by seed {hunted.seed} ({hunted.seed + 1} seeds{alone}): {hunted.violation}"
        else:
            outcome = f"NOT caught in {hunted.tried} seeds"
        missed += hunted.seed is None
        print(f"{mutant.name} [{mutant.fixed_by}] ({family}, {took:.0f} s): {outcome}", flush=True)
        for seed, violation in hunted.otherwise:
            print(f"  seed {seed} failed otherwise (not counted): {violation}", flush=True)
    if args.table or args.into:
        _table(found, args.into)
    return 1 if missed else 0


def _commit() -> str:
    """The code being measured: HEAD's short hash, "+" if the tree has changes ("" outside a git checkout)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, check=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


def _table(found: dict[str, Result], into: Path | None) -> int:
    table = render(MUTANTS, found)
    if into is not None:
        write_into(into, table)
    print(table)
    return 0
