"""A submit's doorbells: one trigger event per queue its batch went to, rung once it is stored and committed.

A batch with a not_before has its doorbells, and its queues' first looks, scheduled for when its chunks are
visible: `VISIBLE_MARGIN` after it. When Service Bus cannot be reached the doorbells are deferred: this process
rings them again (`shared.bus.deferrals`), and the fallback timer looks at their queues at its next tick should
it die first.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from shared.batch.batches import Manifest
from shared.core.errors import StorageError, TriggerUnavailable
from shared.core.events import Reason, TriggerEvent
from shared.engine.wakeups import WAKE_MARGIN_MS
from shared.services import Services
from shared.watch import lookout

log = logging.getLogger("shared.intake.submit")  # its records read as the submit's, as they always have

# A scheduled batch's chunks are hidden for whole seconds counted before they are stored (`submit.prepare`), so
# they become visible up to a second after its not_before, later still by a submitting host's clock behind the
# storage service's: a doorbell at the not_before itself found them hidden, and the batch waited for its
# queue's next look (minutes, once the chain had backed off). Its doorbells and first look come this much later,
# the margin a retry's wake-up keeps for hosts' clocks (`shared.engine.wakeups`) and the second.
VISIBLE_MARGIN = timedelta(milliseconds=1000 + WAKE_MARGIN_MS)


async def ring(
    services: Services, manifest: Manifest, payload_size: int, at: datetime | None = None, *, committed: bool = False
) -> str:
    """One `submitted` event per queue the batch went to; 'deferred' if Service Bus is unreachable. A batch
    with a not_before (`at`) has its doorbells and its queues' first looks scheduled for when its chunks are
    visible (`VISIBLE_MARGIN` after it): no poller waits for it meanwhile. `committed`: the batch is committed
    and indexed, so each event names its attempt (a hint its drainer admits the batch by with no manifest read,
    as by a lane's mark)."""
    at = at + VISIBLE_MARGIN if at is not None else None
    # Its chunks are stored (and, with a not_before, visible from `at`): a drainer's look begun after that sees them.
    ready_ms = math.ceil(max(time.time(), at.timestamp() if at is not None else 0.0) * 1000)
    account, batch_id = services.settings.account_name, manifest.batch_id
    attempt = manifest.attempt if committed else None
    events = [
        TriggerEvent(
            account,
            queue,
            Reason.SUBMITTED,
            payload_size,
            batch_id,
            ready_ms=ready_ms,
            attempt=attempt,
            scheduled=at is not None,
        )
        for queue in manifest.queues
    ]
    for n, event in enumerate(events):
        try:
            await services.publisher.publish(event, at=at)
        except TriggerUnavailable as e:
            log.warning(
                "batch %s accepted without a trigger (this process tries the trigger again; the fallback covers "
                "it if this process dies first): %s", manifest.batch_id, e,
            )  # fmt: skip
            await defer(services, events[n:], at)
            return "deferred"
        await lookout.watch(services, event, at=at)
    return "published"


def not_yet(not_before: str | None) -> datetime | None:
    """A manifest's not_before while it is still ahead: when its doorbells ring."""
    when = datetime.fromisoformat(not_before) if not_before is not None else None
    return when if when is not None and when > datetime.now(timezone.utc) else None


async def defer(services: Services, events: Sequence[TriggerEvent], at: datetime | None = None) -> None:
    """The doorbells that could not ring: this process tries them (and the look chains) again, scheduled for `at`
    (a batch's not_before) if it is given, and the fallback timer looks at their queues at its next tick (its
    back-off back at the floor) if this process dies first."""
    now_ms = int(time.time() * 1000)
    for event in events:
        services.deferred.add(event, at=at)
        try:
            await services.backoff.save(event.queue, services.backoff.policy.initial(now_ms))
        except StorageError as e:
            log.warning("could not reset the fallback's back-off for %s: %s", event.queue, e)
