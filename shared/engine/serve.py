"""The engine's entry for one drain event: a drain session, or, when storage is out, a `continue` in a moment.

`shared.router` sends every reason but a look and a replay step here.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from shared.core.errors import StorageError, TriggerUnavailable
from shared.core.events import Reason, TriggerEvent
from shared.engine.drainer import STORAGE_RETRY_S, Drainer
from shared.engine.report import DrainReport
from shared.services import Services
from shared.store.received import utcnow

log = logging.getLogger("shared.engine.drainer")  # one logger for the whole engine


# A doorbell's `ready_ms` comes from the submitting instance's clock: instances may disagree by a few seconds.
COVER_SKEW_MS = 5_000


async def serve(services: Services, event: TriggerEvent, trace: str | None = None) -> DrainReport:
    """Serve a drain event: drain the
    queue it names. `trace`: the traceparent the event carried (shared.telemetry.tracing.from_event)."""
    learn_committed(services, event)
    if covered(services, event):
        # A drainer of this process looked at every lane of the partition after this doorbell's work was stored
        # and found none visible (it had been drained, or another drainer holds it): nothing for this event to do.
        # A burst of submits (2,000 tenants' one each) then costs one look, not one drain execution per doorbell.
        log.debug("doorbell of %s for batch %s covered by a later look", event.queue, event.batch_id)
        return DrainReport(event.queue, event.slot, event.reason.value, outcome="covered")
    try:
        return await Drainer(services, event.queue, slot=event.slot, reason=event.reason, trace=trace).run()
    except StorageError as e:
        # Storage is out: come back in a moment rather than burn the event's deliveries into dead-lettering.
        log.warning("drain of %s stopped by storage (%s); continuing in %d s", event.queue, e, STORAGE_RETRY_S)
        again = TriggerEvent(event.account, event.queue, Reason.CONTINUE, slot=event.slot)
        try:
            await services.publisher.publish(again, at=utcnow() + timedelta(seconds=STORAGE_RETRY_S))
        except TriggerUnavailable:
            raise e from None  # neither service answers: let Service Bus redeliver this event
        return DrainReport(event.queue, event.slot, event.reason.value, outcome="storage-failed")


def learn_committed(services: Services, event: TriggerEvent) -> None:
    """A doorbell that names its batch's committed attempt: this process's drainers, the one already draining the
    partition too, admit that batch's chunks with no manifest read. A lane's mark names only its latest batch, so
    a tenant's overlapping submits each read a manifest (and wrote an index entry) otherwise. Taken as a hint
    (`CommittedAttempts.judge`): a chunk of another attempt has its manifest read, never dropped on a doorbell's
    word, since Service Bus is not where the batch's state lives."""
    if event.reason is not Reason.SUBMITTED or event.batch_id is None or event.attempt is None:
        return
    services.committed.put(event.batch_id, event.attempt, now=time.monotonic(), accepted_ms=event.ready_ms, hint=True)


def covered(services: Services, event: TriggerEvent) -> bool:
    """A submit's doorbell whose work a closing look of this process's drainers (one that found the partition
    without visible work) already covered: the look listed the mark its submit left on its lane after storing
    it (`Services.drained`: no clock is compared, so a flood's doorbells queued behind the drain that took their
    work end at once, however soon after it they come), or the work was ready (`ready_ms`) more than
    COVER_SKEW_MS before the look began (`Services.looked`). A doorbell rung for a not_before is covered only
    by the second: its chunks were hidden when the look listed its mark."""
    if event.reason is not Reason.SUBMITTED or event.ready_ms is None:
        return False
    listed = event.batch_id is not None and (event.queue, event.batch_id, event.attempt) in services.drained
    if listed and not event.scheduled:
        return True
    return event.ready_ms + COVER_SKEW_MS < services.looked.get(event.queue, 0)
