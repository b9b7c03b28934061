"""Defects in what a drainer admits and what a submit answers, caught by the checks on every handler call (no
call for a chunk whose batch is not committed, or of an attempt a resumed submit replaced:
`sim.world.World.on_handler_start`) and on what the submits answered (`sim.checks.final`: a 202 means an accepted
manifest, every accepted batch is listed)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from shared.batch import batches
from shared.batch.batches import Admission, Manifest, State
from shared.batch.verdicts import CommittedAttempts
from shared.core.errors import IdempotencyConflict
from shared.engine import chunks
from shared.engine.chunks import ChunkWork
from shared.intake import submit
from sim.doors.callers import CONFLICT
from sim.mutants.base import Mutant, scoped, swap


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


# ---- the audit's hand-made reverts (issue 37 item 3) ---------------------------------------------------------


@contextmanager
def _index_not_written_by_drainer() -> Iterator[None]:
    """a6c231e reverted: a drainer that admits a batch by its manifest does not write its index entry, so a batch
    whose submit died between its commit and its index write is processed but never listed."""

    async def indexed(self: ChunkWork, manifest: Manifest) -> None:
        return None

    yield from swap(ChunkWork, "_indexed", indexed)


@contextmanager
def _doorbell_attempt_is_storage_word() -> Iterator[None]:
    """a3dd4cd reverted: a doorbell's attempt is taken as storage's word: it replaces what a manifest or a mark
    said, and a chunk of another attempt is condemned as stale without its manifest read."""
    put = CommittedAttempts.put

    def judge(self: CommittedAttempts, batch_id: str, attempt: str, *, now: float) -> bool | None:
        committed = self.get(batch_id, now=now)
        return None if committed is None else committed == attempt

    def trusting(self: CommittedAttempts, batch_id: str, attempt: str, *, now: float, accepted_ms: int | None = None,
                 hint: bool = False) -> None:  # fmt: skip
        put(self, batch_id, attempt, now=now, accepted_ms=accepted_ms)

    with contextlib.ExitStack() as stack:
        stack.enter_context(scoped(CommittedAttempts, "judge", judge))
        stack.enter_context(scoped(CommittedAttempts, "put", trusting))
        yield


MUTANTS = [
    Mutant("admit-ignores-attempt", "issue 18 / design 'Idempotency'", "a drainer processes chunks of an attempt a "
           "resumed submit replaced", _admit_ignores_attempt, family="submit",
           invariant='no handler call of an abandoned attempt'),
    Mutant("admit-while-staging", "first design (commit before processing)", "a chunk is processed before its "
           "batch is committed", _admit_while_staging, family="submit", expect="while its manifest is",
           invariant='no handler call while the manifest is staging',
           why="the drainer now writes a batch's index entry from its manifest and refuses one not accepted (a6c231e), "
               "so a staging chunk is left for redelivery with the mutant too: a second guard holds"),
    Mutant("resumed-attempt-first-start", "e71a009 (issue 18 item 1)", "a resumed attempt is judged by the first "
           "attempt's start, so its chunks are discarded as dead", _resumed_attempt_judged_by_first_start,
           family="submit",
           why="a drainer must meet a resumed attempt's chunk between its store and its commit (milliseconds apart), "
               "more than `STAGING_TTL_S` (120 s) after the first attempt began; the world's clients retry 2 s after "
               "a failure. Plan: clients that retry after minutes while other batches drain, with slow storage "
               "stretching the resumed attempt's store-to-commit window"),
    Mutant("refused-submit-not-abandoned", "38c3f86 (issue 12 defects 2, 3)", "a submit answered 503 leaves its "
           "manifest staging, not abandoned", _refused_submit_not_abandoned, family="submit",
           why="nothing is processed either way; only how soon drainers discard the failed submit's chunks differs, and"
               " no invariant bounds that wait"),
    Mutant("own-commit-is-a-conflict", "7458705 (found here)", "a commit whose answer was lost is answered 409 and "
           "its batch left out of the batch list", _own_commit_is_a_conflict, family="submit", expect=CONFLICT,
           invariant="a submit answers 409 only for a key reused with other options or still in flight"),
    # The audit's hand-made reverts.
    Mutant("index-not-written-by-drainer", "a6c231e (found here)", "the index entry of a batch admitted by its "
           "manifest not written by the drainer", _index_not_written_by_drainer, family="submit",
           expect="missing from the batch list", invariant="every accepted batch is in the batch list",
           why="lost since 9f9f88e: finalize's stamp now writes both index entries, so a batch its drainer did not "
           "index is listed once final, and the list is checked once the run is quiet; what is left of the defect "
           "is a running batch missing from the list. Plan: list reads while batches run, holding every batch "
           "with a handler call to be listed within a bound"),
    Mutant("doorbell-attempt-is-storage-word", "a3dd4cd (issue 30 item 5)", "a doorbell's attempt taken as "
           "storage's word", _doorbell_attempt_is_storage_word, family="submit", expect="pending",
           invariant="every accepted batch completes"),
]  # fmt: skip
