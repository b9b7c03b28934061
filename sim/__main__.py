"""`python -m sim --seeds N [--start S] [--family F] [--no-faults] [--seed K]`: run seeds, print failures with their
schedule, and the seeds per second."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from sim.scenario import FAMILIES
from sim.world import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__)
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--seed", type=int, default=None, help="run this one seed and print its whole schedule")
    parser.add_argument("--family", choices=FAMILIES, default="random", help="the scenario family (sim.scenario)")
    parser.add_argument("--no-faults", action="store_true", help="scenarios without faults")
    parser.add_argument("--stop", action="store_true", help="stop at the first failing seed")
    parser.add_argument("-v", "--verbose", action="store_true", help="the app's own warnings too")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.verbose else logging.CRITICAL)
    seeds = [args.seed] if args.seed is not None else list(range(args.start, args.start + args.seeds))
    failed: list[int] = []
    began = time.perf_counter()
    for seed in seeds:
        outcome = run(seed, faults=not args.no_faults, family=args.family)
        if args.seed is not None:
            print(outcome.report())
            print("\n".join(outcome.trace) if outcome.ok else "")
        elif not outcome.ok:
            print(outcome.report(), flush=True)
        if not outcome.ok:
            failed.append(seed)
            if args.stop:
                break
    took = time.perf_counter() - began
    done = len(seeds) if not (args.stop and failed) else seeds.index(failed[-1]) + 1
    print(f"{done} seed(s) in {took:.1f} s ({done / took:.2f} seeds/s), {len(failed)} failed: {failed}")
    if os.environ.get("PYTHONHASHSEED") is None:
        print("note: set PYTHONHASHSEED=0 for schedules that replay across processes", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
