"""`python -m sim --seeds N [--start S] [--family F|all] [--no-faults] [--seed K]`: run seeds, print failures with
their schedule, the seeds per second, and how many seeds of each family reached each feature (`sim.platform.
FEATURES`). A run of every family (`--family all`) fails if a feature was reached by no seed."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from sim.platform import FEATURES
from sim.scenario import FAMILIES
from sim.world import run

# `all` runs SEEDS / this many seeds of these families (a volume seed takes ~10 s, a history seed ~3 s of CPU, a
# flood seed ~2.3 s)
SHARE = {"volume": 50, "history": 5, "flood": 5}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__)
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run (per family with `all`)")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--seed", type=int, default=None, help="run this one seed and print its whole schedule")
    parser.add_argument("--family", choices=(*FAMILIES, "all"), default="random", help="the scenario family")
    parser.add_argument("--no-faults", action="store_true", help="scenarios without faults")
    parser.add_argument("--stop", action="store_true", help="stop at the first failing seed")
    parser.add_argument("-v", "--verbose", action="store_true", help="the app's own warnings too")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.verbose else logging.CRITICAL)
    if args.seed is not None:
        outcome = run(args.seed, faults=not args.no_faults, family="random" if args.family == "all" else args.family)
        print(outcome.report())
        print(f"features: {', '.join(sorted(outcome.features)) or '-'}")
        print("\n".join(outcome.trace) if outcome.ok else "")
        return 0 if outcome.ok else 1
    families = FAMILIES if args.family == "all" else (args.family,)
    failed: dict[str, list[int]] = {}
    reach: dict[str, dict[str, int]] = {}
    ran: dict[str, int] = {}
    for family in families:
        count = max(1, args.seeds // SHARE.get(family, 1)) if args.family == "all" else args.seeds
        began = time.perf_counter()
        done, bad, reached = seeds_of(family, range(args.start, args.start + count), args)
        took = time.perf_counter() - began
        failed[family], reach[family], ran[family] = bad, reached, done
        print(f"{family}: {done} seed(s) in {took:.1f} s ({done / took:.2f} seeds/s), {len(bad)} failed: {bad}",
              flush=True)  # fmt: skip
        if args.stop and bad:
            break
    print(reach_table(reach, ran))
    unreached = [f for f in FEATURES if not any(r.get(f) for r in reach.values())]
    if args.family == "all" and unreached:
        print(f"FAILED: features no seed reached: {', '.join(unreached)}")
    if os.environ.get("PYTHONHASHSEED") is None:
        print("note: set PYTHONHASHSEED=0 for schedules that replay across processes", file=sys.stderr)
    return 1 if any(failed.values()) or (args.family == "all" and unreached) else 0


def seeds_of(family: str, seeds: range, args: argparse.Namespace) -> tuple[int, list[int], dict[str, int]]:
    """(seeds run, seeds failed, seeds that reached each feature)."""
    failed: list[int] = []
    reached: dict[str, int] = {}
    done = 0
    for seed in seeds:
        outcome = run(seed, faults=not args.no_faults, family=family)
        done += 1
        for feature in outcome.features:
            reached[feature] = reached.get(feature, 0) + 1
        if not outcome.ok:
            print(outcome.report(), flush=True)
            failed.append(seed)
            if args.stop:
                break
    return done, failed, reached


def reach_table(reach: dict[str, dict[str, int]], ran: dict[str, int]) -> str:
    """Per feature, the share of each family's seeds that reached it."""
    families = list(reach)
    lines = ["feature reach (share of each family's seeds):", f"  {'':18}" + "".join(f"{f:>10}" for f in families)]
    for feature in FEATURES:
        cells = "".join(f"{reach[f].get(feature, 0) / max(1, ran[f]):>10.0%}" for f in families)
        lines.append(f"  {feature:18}{cells}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
