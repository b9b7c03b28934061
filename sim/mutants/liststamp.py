"""The batch list judging a stamped batch from its records alone, caught by the quiet check that the list's status of
a batch stamped final is the stamp (`sim.checks.final`: `ended` for `cancelled`, `failed`, `expired`): a cancel that
read the batch before its last record and ended it after gets it stamped `cancelled` while every item succeeded,
and the list said `completed`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from shared.ops import progress, reports
from shared.store.batch_index import IndexEntry
from sim.mutants.base import Mutant, scoped

STAMPED = "but the batch list says"  # what `sim.checks.final.final_checks` writes


@contextmanager
def _list_blind_to_the_stamp() -> Iterator[None]:
    """The fix reverted: the list ignores the stamp in the index entry and never reads a manifest."""
    judged = progress.batch_progress

    def records_only(batch: IndexEntry, *args: Any) -> dict[str, Any]:
        return judged(replace(batch, final=None), *args)

    def never(batch: IndexEntry, shown: dict[str, Any]) -> bool:
        return False

    with scoped(reports, "batch_progress", records_only), scoped(progress, "unsure", never):
        yield


MUTANTS = [
    Mutant("list-blind-to-the-stamp", "9f9f88e", "the batch list judges a batch from its index entry and result "
           "listing alone: one stamped cancelled by a cancel that ended it after its last record shows completed",
           _list_blind_to_the_stamp, family="lifecycle", expect=STAMPED,
           invariant="the batch list shows a stamped batch's final status (`sim.checks.final`)"),
]  # fmt: skip
