"""Defects in what a drainer admits and what a submit answers, caught by the checks on every handler call (no
call for a chunk whose batch is not committed, or of an attempt a resumed submit replaced:
`sim.world.World.on_handler_start`) and on what the submits answered (`sim.checks`: a 202 means an accepted
manifest, every accepted batch is listed)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from shared.batch import batches
from shared.batch.batches import Admission, Manifest, State
from shared.core.errors import IdempotencyConflict
from shared.engine import chunks
from shared.intake import submit
from sim.mutants.base import Mutant, swap


@contextmanager
def _admit_ignores_attempt() -> Iterator[None]:
    def admit(manifest: Manifest, attempt: str, *, now: datetime, staging_ttl_s: int) -> Admission:
        return batches.admit(manifest, manifest.attempt, now=now, staging_ttl_s=staging_ttl_s)

    yield from swap(chunks, "admit", admit)


@contextmanager
def _admit_while_staging() -> Iterator[None]:
    def admit(manifest: Manifest, attempt: str, *, now: datetime, staging_ttl_s: int) -> Admission:
        verdict = batches.admit(manifest, attempt, now=now, staging_ttl_s=staging_ttl_s)
        return Admission.PROCESS if verdict is Admission.WAIT else verdict

    yield from swap(chunks, "admit", admit)


@contextmanager
def _resumed_attempt_judged_by_first_start() -> Iterator[None]:
    def admit(manifest: Manifest, attempt: str, *, now: datetime, staging_ttl_s: int) -> Admission:
        if manifest.attempt == attempt and manifest.state is State.STAGING:
            age_s = (now - datetime.fromisoformat(manifest.created_at)).total_seconds()
            return Admission.ABANDONED if age_s > staging_ttl_s else Admission.WAIT
        return batches.admit(manifest, attempt, now=now, staging_ttl_s=staging_ttl_s)

    yield from swap(chunks, "admit", admit)


@contextmanager
def _refused_submit_not_abandoned() -> Iterator[None]:
    async def abandon(*args: Any) -> None:
        return None

    yield from swap(submit, "abandon", abandon)


@contextmanager
def _own_commit_is_a_conflict() -> Iterator[None]:
    async def own_commit(*args: Any) -> str:
        raise IdempotencyConflict("a concurrent request with the same Idempotency-Key took this batch over")

    yield from swap(submit, "_own_commit", own_commit)


MUTANTS = [
    Mutant("admit-ignores-attempt", "issue 18 / design 'Idempotency'", "a drainer processes chunks of an attempt a "
           "resumed submit replaced", _admit_ignores_attempt, family="submit"),
    Mutant("admit-while-staging", "first design (commit before processing)", "a chunk is processed before its "
           "batch is committed", _admit_while_staging, family="submit", expect="while its manifest is"),
    Mutant("resumed-attempt-first-start", "e71a009 (issue 18 item 1)", "a resumed attempt is judged by the first "
           "attempt's start, so its chunks are discarded as dead", _resumed_attempt_judged_by_first_start,
           family="submit"),
    Mutant("refused-submit-not-abandoned", "38c3f86 (issue 12 defects 2, 3)", "a submit answered 503 leaves its "
           "manifest staging, not abandoned", _refused_submit_not_abandoned, family="submit"),
    Mutant("own-commit-is-a-conflict", "7458705 (found here)", "a commit whose answer was lost is answered 409 and "
           "its batch left out of the batch list", _own_commit_is_a_conflict, family="submit",
           expect="missing from the batch list"),
]  # fmt: skip
