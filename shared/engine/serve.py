"""The engine's entry for one drain event: a drain session, or, when storage is out, a `continue` in a moment.

`shared.router` sends every reason but a look and a replay step here.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from shared.core.errors import StorageError, TriggerUnavailable
from shared.core.events import Reason, TriggerEvent
from shared.engine.drainer import STORAGE_RETRY_S, Drainer
from shared.engine.report import DrainReport
from shared.services import Services
from shared.store.received import utcnow

log = logging.getLogger("shared.engine.drainer")  # one logger for the whole engine


async def serve(services: Services, event: TriggerEvent, trace: str | None = None) -> DrainReport:
    """Serve a drain event: drain the
    queue it names. `trace`: the traceparent the event carried (shared.telemetry.tracing.from_event)."""
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
