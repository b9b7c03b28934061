"""Defects of the doorbells (issue 36 items 6 and 16), caught by progress (`sim.checks.progress`: a batch with
visible work has its first handler call within a bound) and by what a late doorbell costs (`sim.checks.doorbells`),
in the families that aim at them (`sim.doorbell_families`: `schedule`, `flood`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from shared.bus.deferrals import DeferredTriggers
from shared.core.events import Reason, TriggerEvent
from shared.engine import serve
from shared.intake import doorbells, submit
from shared.services import Services
from sim.mutants.base import Mutant, swap

PROGRESS = "has had no handler call"  # `sim.checks.progress.Progress.check`
COSTLY = "storage call(s), after the drain there"  # `sim.checks.doorbells.Doorbells.judge`
PROGRESS_ROW = "progress: a batch with visible work has its first handler call within a bound (`sim.checks.progress`)"


@contextmanager
def _keyed_retry_rings_at_once() -> Iterator[None]:
    """543e913 reverted, its keyed half (issue 36 item 6): the keyed retry of a scheduled batch whose first submit
    died between its commit and its doorbell rings with no `at`: at once, its look chain armed now; the drainer
    finds only hidden chunks and at the batch's start no doorbell comes."""
    yield from swap(submit, "not_yet", lambda not_before: None)


@contextmanager
def _deferred_doorbell_rings_at_once() -> Iterator[None]:
    """543e913 reverted, its deferral half (issue 36 item 6): a doorbell deferred while Service Bus refused it keeps
    no start time (one pending doorbell per queue): rung at once when Service Bus answers, its look chain too."""
    add = DeferredTriggers.add

    def timeless(
        self: DeferredTriggers, event: TriggerEvent, *, rang: bool = False, at: datetime | None = None
    ) -> None:
        add(self, event, rang=rang, at=None)

    yield from swap(DeferredTriggers, "add", timeless)


@contextmanager
def _doorbell_at_the_start() -> Iterator[None]:
    """The scheduled doorbell's margin put back: a batch's doorbells and first look come at its not_before itself,
    while its chunks, hidden for whole seconds counted before they were stored, become visible up to a second later
    (later still by a host's clock behind): the doorbell finds nothing, the batch waits for the chain's next look."""
    yield from swap(doorbells, "VISIBLE_MARGIN", doorbells.VISIBLE_MARGIN * 0)


@contextmanager
def _late_doorbells_drain() -> Iterator[None]:
    """166fdf3 reverted (issue 36 item 16): a doorbell is covered only by the clock rule (its work ready more than
    COVER_SKEW_MS before a closing look began), not by its batch's mark that the look listed: a flood's doorbells,
    queued behind the drain that took their work and delivered just after it, are each a drain execution."""

    def clock_only(services: Services, event: TriggerEvent) -> bool:
        if event.reason is not Reason.SUBMITTED or event.ready_ms is None:
            return False
        return event.ready_ms + serve.COVER_SKEW_MS < services.looked.get(event.queue, 0)

    yield from swap(serve, "covered", clock_only)


MUTANTS = [
    Mutant("keyed-retry-rings-at-once", "543e913 (issue 36 item 6)", "a scheduled batch's keyed retry rings its "
           "doorbell at once, not at its start", _keyed_retry_rings_at_once, family="schedule", expect=PROGRESS,
           invariant=PROGRESS_ROW),
    Mutant("deferred-doorbell-rings-at-once", "543e913 (issue 36 item 6)", "a scheduled batch's deferred doorbell "
           "rings once Service Bus answers, not at its start", _deferred_doorbell_rings_at_once, family="schedule",
           expect=PROGRESS, invariant=PROGRESS_ROW),
    Mutant("doorbell-before-visible", "VISIBLE_MARGIN (issue 36 item 6)", "a scheduled batch's doorbell "
           "comes at its not_before, before its chunks are visible", _doorbell_at_the_start, family="schedule",
           expect=PROGRESS, invariant=PROGRESS_ROW),
    Mutant("late-doorbells-drain", "166fdf3 (issue 36 item 16)", "a flood's doorbells delivered after the drain "
           "that took their work each drain again", _late_doorbells_drain, family="flood", expect=COSTLY,
           invariant="a doorbell delivered after its process's closing look saw its work taken costs no storage "
                     "call (`sim.checks.doorbells`)"),
]  # fmt: skip
