"""`python -m sim.mutants --verify [FILE]`: does the revert table still hold? Each row as last measured in FILE
(`sim/mutants/measured.jsonl` by default, the lines the table is rendered from) is tried again on today's code: a
row caught by seed S runs seed S first (with the mutant in place, and without it if it failed) and is
*reproduced* if S still catches it; otherwise it is hunted from seed 0 within its mutant's budget, and has *moved*
(to the first seed that catches it now) or is *lost*. A row not caught runs its whole budget again (*still not
caught*, or *now caught*). A mutant with no line in FILE is hunted as by the plain runner."""

from __future__ import annotations

from pathlib import Path

from sim.mutants.base import Mutant
from sim.mutants.hunting import Hunt, Row
from sim.mutants.table import Result

MEASURED = Path(__file__).with_name("measured.jsonl")


def row(mutant: Mutant, prior: Result | None, budget: int) -> Row:
    """The seeds to try for `mutant`, its measured row's catching seed first."""
    if prior is None:
        return Row(mutant, mutant.family, list(range(budget)))
    first = [] if prior.seed is None else [prior.seed]
    return Row(mutant, prior.family, first + [s for s in range(budget) if s != prior.seed])


def judge(prior: Result | None, hunted: Hunt, budget: int) -> tuple[str, str]:
    """(what became of the row: reproduced, moved, lost, still not caught, now caught or new; the line saying so)."""
    caught = "" if hunted.seed is None else f"seed {hunted.seed} ({hunted.seed + 1} seeds): {hunted.violation}"
    if prior is None:
        return "new", f"not measured before; {f'caught by {caught}' if caught else f'not caught in {budget} seeds'}"
    if prior.seed is None:
        if hunted.seed is None:
            return "still not caught", f"still not caught in {budget} seeds (measured: {prior.tried})"
        return "now caught", f"NOW CAUGHT by {caught} (measured: not caught in {prior.tried})"
    if hunted.seed == prior.seed:
        also = "" if hunted.baseline_ok else " (today's code fails that seed too, otherwise)"
        return "reproduced", f"reproduced by {caught}{also}"
    if hunted.seed is not None:
        return "moved", f"MOVED: seed {prior.seed} no longer catches it; {caught}"
    return "lost", f"LOST: seed {prior.seed} no longer catches it, nor any of the first {budget} seeds"
