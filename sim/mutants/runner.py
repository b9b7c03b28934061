"""The revert table's runner: `python -m sim.mutants [--only NAME[,NAME]] [--seeds N] [--family F] [--jobs J]`
prints, per mutant, the first seed of its family that fails with it in place (and not the same way without it)
and the invariant that failed, or that none did within its seed budget; the seeds run in J processes, the rows
print in the table's order (`sim.mutants.hunting`). `--json FILE` appends each result to FILE; `--table` prints
the revert table from this run's results (with `--render FILE...`, from saved ones instead), and `--into
RELIABILITY.md` writes it there between its markers (`sim.mutants.table`). `--verify [FILE]` tries each row of
the table as measured again (`sim.mutants.verify`)."""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
from collections import Counter
from pathlib import Path

from sim.mutants import MUTANTS, verify
from sim.mutants.base import SEEDS
from sim.mutants.hunting import Hunt, Row, hunts
from sim.mutants.table import Result, load, render, write_into


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.mutants", description=__doc__)
    parser.add_argument("--seeds", type=int, default=None, help=f"seeds per mutant (default: its own, else {SEEDS})")
    parser.add_argument("--only", default=None, help="one mutant by name (or a comma-separated list)")
    parser.add_argument("--family", default=None, help="this scenario family for every mutant (default: its own)")
    parser.add_argument("--json", type=Path, default=None, help="append each mutant's result to this file")
    parser.add_argument("--table", action="store_true", help="print the revert table (RELIABILITY.md)")
    parser.add_argument("--render", type=Path, nargs="+", default=None, help="the table from these --json files")
    parser.add_argument("--into", type=Path, default=None, help="write the table into this file's markers")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: the CPUs)")
    parser.add_argument("--verify", type=Path, nargs="?", const=verify.MEASURED, default=None,
                        help="try each row of this --json file again (default: the table's own)")  # fmt: skip
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)
    if args.render:
        return _table(load(args.render), args.into)
    if args.verify and args.family:
        parser.error("--verify tries each row in the family it was measured in: no --family")
    only = set(args.only.split(",")) if args.only else None
    measured = load([args.verify]) if args.verify else {}
    rows, budgets = [], {}
    for mutant in MUTANTS:
        if only and mutant.name not in only:
            continue
        budgets[mutant.name] = budget = max(1, args.seeds or mutant.seeds)
        if args.verify:
            rows.append(verify.row(mutant, measured.get(mutant.name), budget))
        else:
            rows.append(Row(mutant, args.family or mutant.family, list(range(budget))))
    commit = _commit()
    found: dict[str, Result] = {}
    became: Counter[str] = Counter()
    for row, hunted, cpu_s, took in hunts(rows, args.jobs):
        mutant = row.mutant
        tried = hunted.tried if hunted.seed is None else hunted.seed + 1
        result = Result(mutant.name, row.family, tried, hunted.seed, hunted.violation, hunted.others, commit)
        found[mutant.name] = result
        if args.verify:
            prior = measured.get(mutant.name)
            what, outcome = verify.judge(prior, hunted, budgets[mutant.name])
            became[what] += 1
            changed = what not in ("reproduced", "still not caught") or prior is None or prior.tried != tried
        else:
            outcome, changed = _outcome(hunted), True
            became["caught" if hunted.seed is not None else "not caught"] += 1
        if args.json is not None and changed:
            with args.json.open("a") as out:
                print(result.line(), file=out)
        print(f"{mutant.name} [{mutant.fixed_by}] ({row.family}, {took:.0f} s, {cpu_s:.0f} CPU s): {outcome}",
              flush=True)  # fmt: skip
        for seed, violation in hunted.otherwise:
            print(f"  seed {seed} failed otherwise (not counted): {violation}", flush=True)
    print(f"{len(found)} row(s): {', '.join(f'{n} {what}' for what, n in sorted(became.items()))}")
    if args.table or args.into:
        _table(found, args.into)
    if args.verify:
        return 0 if became["reproduced"] + became["still not caught"] == len(found) else 1
    return 1 if became["not caught"] else 0


def _outcome(hunted: Hunt) -> str:
    if hunted.seed is None:
        return f"NOT caught in {hunted.tried} seeds"
    alone = "" if not hunted.others else f", with {hunted.others} other violation(s)"
    return f"caught by seed {hunted.seed} ({hunted.seed + 1} seeds{alone}): {hunted.violation}"


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
