"""Defects put back into the app's code, one at a time, to show the simulator catches them (RELIABILITY.md,
"The simulation": the revert table). Each mutant is a patch applied in this process for the length of its
runs; the app's files are untouched. `python -m sim.mutants [--seeds N]` prints, per mutant, the first failing
seed and the invariant that failed.

A defect fixed in a commit that cannot be expressed as a patch of today's code is run against its revision
instead: `python -m sim.at_revision REV --seeds N` (the simulator copied into a checkout of REV).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.batch import batches
from shared.batch.batches import Admission, Manifest, State
from shared.core.errors import IdempotencyConflict
from shared.engine import chunks, settling
from shared.intake import submit
from shared.store import leases
from sim.world import run


@dataclass(frozen=True)
class Mutant:
    name: str
    fixed_by: str  # the commit or issue item that fixed it
    defect: str
    patch: Callable[[], AbstractContextManager[None]]
    family: str = "random"  # the scenario family that aims at it (sim.scenario)


def _swap(module: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


@contextmanager
def _admit_ignores_attempt() -> Iterator[None]:
    def admit(manifest: Manifest, attempt: str, *, now: datetime, staging_ttl_s: int) -> Admission:
        return batches.admit(manifest, manifest.attempt, now=now, staging_ttl_s=staging_ttl_s)

    yield from _swap(chunks, "admit", admit)


@contextmanager
def _admit_while_staging() -> Iterator[None]:
    def admit(manifest: Manifest, attempt: str, *, now: datetime, staging_ttl_s: int) -> Admission:
        verdict = batches.admit(manifest, attempt, now=now, staging_ttl_s=staging_ttl_s)
        return Admission.PROCESS if verdict is Admission.WAIT else verdict

    yield from _swap(chunks, "admit", admit)


@contextmanager
def _resumed_attempt_judged_by_first_start() -> Iterator[None]:
    def admit(manifest: Manifest, attempt: str, *, now: datetime, staging_ttl_s: int) -> Admission:
        if manifest.attempt == attempt and manifest.state is State.STAGING:
            age_s = (now - datetime.fromisoformat(manifest.created_at)).total_seconds()
            return Admission.ABANDONED if age_s > staging_ttl_s else Admission.WAIT
        return batches.admit(manifest, attempt, now=now, staging_ttl_s=staging_ttl_s)

    yield from _swap(chunks, "admit", admit)


@contextmanager
def _refused_submit_not_abandoned() -> Iterator[None]:
    async def abandon(*args: Any) -> None:
        return None

    yield from _swap(submit, "abandon", abandon)


@contextmanager
def _own_commit_is_a_conflict() -> Iterator[None]:
    async def own_commit(*args: Any) -> str:
        raise IdempotencyConflict("a concurrent request with the same Idempotency-Key took this batch over")

    yield from _swap(submit, "_own_commit", own_commit)


@contextmanager
def _stale_receipt_is_an_error() -> Iterator[None]:
    class Never(Exception):
        pass

    yield from _swap(settling, "PopReceiptMismatch", Never)


@contextmanager
def _lease_lapses_under_a_slow_renewal() -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        stack.enter_context(_scoped(leases, "RENEW_TIMEOUT_S", 3600.0))
        stack.enter_context(_scoped(leases, "StorageUnavailable", _Unmatched))
        yield


class _Unmatched(Exception):
    """Matches nothing: an `except` clause given it is as if it were not there."""


@contextmanager
def _scoped(module: Any, name: str, value: Any) -> Iterator[None]:
    yield from _swap(module, name, value)


MUTANTS = [
    Mutant("admit-ignores-attempt", "issue 18 / design 'Idempotency'", "a drainer processes chunks of an attempt a "
           "resumed submit replaced", _admit_ignores_attempt),
    Mutant("admit-while-staging", "first design (commit before processing)", "a chunk is processed before its "
           "batch is committed", _admit_while_staging),
    Mutant("resumed-attempt-first-start", "e71a009 (issue 18 item 1)", "a resumed attempt is judged by the first "
           "attempt's start, so its chunks are discarded as dead", _resumed_attempt_judged_by_first_start),
    Mutant("refused-submit-not-abandoned", "38c3f86 (issue 12 defects 2, 3)", "a submit answered 503 leaves its "
           "manifest staging, not abandoned", _refused_submit_not_abandoned),
    Mutant("own-commit-is-a-conflict", "7458705 (found here)", "a commit whose answer was lost is answered 409 and "
           "its batch left out of the batch list", _own_commit_is_a_conflict, "submit"),
    Mutant("stale-receipt-is-an-error", "a8264ba (found here)", "a delete or update with a stale pop receipt takes "
           "the generic storage-error path", _stale_receipt_is_an_error),
    Mutant("lease-lapses-under-renewal", "c123cbc (found here)", "a renewal that fails or hangs lets the lease lapse "
           "under a chunk still in the handler", _lease_lapses_under_a_slow_renewal, "limits"),
]  # fmt: skip


def hunt(mutant: Mutant, seeds: range, family: str | None = None) -> tuple[int | None, str]:
    """The first seed in `seeds` on which the simulator fails with `mutant` in place, and not the same way
    without it (a seed that fails on today's code too counts only if the mutant changes what breaks)."""
    for seed in seeds:
        with mutant.patch():
            outcome = run(seed, family=family or mutant.family)
        if not outcome.ok:
            baseline = run(seed, family=family or mutant.family)
            if baseline.violations != outcome.violations:
                return seed, outcome.violations[0]
    return None, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.mutants", description=__doc__)
    parser.add_argument("--seeds", type=int, default=300, help="give up on a mutant after this many seeds")
    parser.add_argument("--only", default=None, help="one mutant by name")
    parser.add_argument("--family", default=None, help="this scenario family for every mutant (default: its own)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)
    missed = 0
    for mutant in MUTANTS:
        if args.only and mutant.name != args.only:
            continue
        seed, violation = hunt(mutant, range(args.seeds), args.family)
        found = f"caught by seed {seed} ({seed + 1} seeds): {violation}" if seed is not None else "NOT caught"
        missed += seed is None
        print(f"{mutant.name} [{mutant.fixed_by}] ({args.family or mutant.family}): {found}", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
