"""The status route's half of 3625368 put back: it answers a batch final by its records from the records, unstamped,
instead of finalizing it first (stamp over the manifest's ETag, then notice) and reading it again. A cancel that
read the batch before its last record then ends it before any stamp, and it is stamped `cancelled`: a caller was
answered `completed`, then `cancelled`. Caught by `sim.checks.answered_final` (a final status once answered never
changes) in the `stale-cancel` family (`sim.stale_cancel`); not in 600 `lifecycle` seeds, where a status read
seldom comes between a cancel's read and its end. The other half (`finalize` stamps before it stores the notice)
is not this mutant's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from shared.ops import reports
from sim.checks.answered_final import CHANGED
from sim.mutants.base import Mutant, scoped


@contextmanager
def _status_answers_unstamped_final() -> Iterator[None]:
    """The fix reverted: no status is final to the route's stamp-first step (`reports.FINAL` empty there only), so
    it answers what the records say and leaves the stamp to the router, a cancel or the timer."""
    with scoped(reports, "FINAL", ()):
        yield


MUTANTS = [
    Mutant("status-answers-unstamped-final", "3625368 (issue 37, lifecycle seed 601)", "the status route answers a "
           "batch final by its records before it is stamped, so a cancel that read it earlier can still end it "
           "cancelled", _status_answers_unstamped_final, family="stale-cancel", expect=CHANGED,
           invariant="a final status once answered never changes (`sim.checks.answered_final`)"),
]  # fmt: skip
