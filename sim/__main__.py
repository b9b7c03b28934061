"""`python -m sim --seeds N [--start S] [--family F|all] [--no-faults] [--seed K] [--jobs J]`: run seeds, print
failures with their schedule, the seeds per second, and how many seeds of each family reached each feature
(`sim.platform.FEATURES`). A run of every family (`--family all`) fails if a feature was reached by no seed. The
seeds run in J processes (`sim.pool`); what is printed is what one process prints, in seed order."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from sim.platform import FEATURES
from sim.pool import ordered
from sim.scenario import FAMILIES
from sim.world import run

# `all` runs SEEDS / this many seeds of these families (the costliest seeds: volume's many items, history's and
# flood's many requests; seeds per CPU second in RELIABILITY.md)
SHARE = {"volume": 50, "history": 5, "flood": 5}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__)
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run (per family with `all`)")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--seed", type=int, default=None, help="run this one seed and print its whole schedule")
    parser.add_argument("--family", choices=(*FAMILIES, "all"), default="random", help="the scenario family")
    parser.add_argument("--no-faults", action="store_true", help="scenarios without faults")
    parser.add_argument("--stop", action="store_true", help="stop at the first failing seed")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: the CPUs)")
    parser.add_argument("--digests", action="store_true", help="print each seed's fingerprint (`Outcome.digest`)")
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
    counts = {f: max(1, args.seeds // SHARE.get(f, 1)) if args.family == "all" else args.seeds for f in families}
    ran = {family: Family() for family in families}
    began = time.perf_counter()
    for (family, seed, _), timed in ordered(tasks(counts, args), run_seed, args.jobs):
        tally, seen = ran[family], timed.value
        tally.done += 1
        tally.cpu_s += timed.cpu_s
        for feature in seen.features:
            tally.reached[feature] = tally.reached.get(feature, 0) + 1
        if args.digests:
            print(f"{family} seed {seed}: {seen.digest}", flush=True)
        if not seen.ok:
            print(seen.report, flush=True)
            tally.failed.append(seed)
        if tally.done == counts[family] or (args.stop and not seen.ok):
            now = time.perf_counter()
            print(tally.line(family, max(now - began, 1e-6)), flush=True)
            began = now
            if args.stop and not seen.ok:
                break
    ran = {family: tally for family, tally in ran.items() if tally.done}
    print(reach_table({f: t.reached for f, t in ran.items()}, {f: t.done for f, t in ran.items()}))
    unreached = [f for f in FEATURES if not any(t.reached.get(f) for t in ran.values())]
    if args.family == "all" and unreached:
        print(f"FAILED: features no seed reached: {', '.join(unreached)}")
    if os.environ.get("PYTHONHASHSEED") is None:
        print("note: set PYTHONHASHSEED=0 for schedules that replay across processes", file=sys.stderr)
    return 1 if any(t.failed for t in ran.values()) or (args.family == "all" and unreached) else 0


@dataclass
class Family:
    """One family's seeds in a run, so far."""

    done: int = 0
    failed: list[int] = field(default_factory=list)
    reached: dict[str, int] = field(default_factory=dict)  # seeds that reached each feature
    cpu_s: float = 0.0  # the seeds' CPU time, summed over the processes that ran them

    def line(self, family: str, took: float) -> str:
        """`took`: wall seconds from the previous family's last seed (or the start) to this one's."""
        return (
            f"{family}: {self.done} seed(s) in {took:.1f} s ({self.done / took:.2f} seeds/s; {self.cpu_s:.1f} CPU s, "
            f"{self.done / max(self.cpu_s, 1e-6):.2f} seeds per CPU s), {len(self.failed)} failed: {self.failed}"
        )


@dataclass(frozen=True)
class Ran:
    """What a worker sends back of one seed's `Outcome` (the pipe carries little)."""

    ok: bool
    report: str  # a failed seed's whole report ("" if it passed)
    features: frozenset[str]
    digest: str


def tasks(counts: dict[str, int], args: argparse.Namespace) -> Iterator[tuple[str, int, bool]]:
    for family, count in counts.items():
        for seed in range(args.start, args.start + count):
            yield family, seed, not args.no_faults


def run_seed(task: tuple[str, int, bool]) -> Ran:
    family, seed, faults = task
    outcome = run(seed, faults=faults, family=family)
    return Ran(outcome.ok, "" if outcome.ok else outcome.report(), outcome.features, outcome.digest())


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
