"""The drain function's router: one trigger event, one owner.

Every event on the trigger queue comes through the one Service Bus-triggered function. This module checks that
the event is one of this app's, reads its reason and hands it to the module that owns that reason: a look to the
watchers (`shared.watch.lookout`), a background replay's step to the operator tools (`shared.ops.replay_jobs`), a
completion notice's attempt to `shared.ops.notices` (which also hears, after each drain, which batches it touched),
every other reason to the drain engine (`shared.engine.drainer`). The engine imports no feature: a new kind of
event gets a line here, not a branch in the engine.
"""

from __future__ import annotations

import logging

from shared.batch.batches import is_batch_id
from shared.core.errors import MalformedEvent, NotFound
from shared.core.events import Reason, TriggerEvent
from shared.engine.report import DrainReport
from shared.engine.serve import serve
from shared.ops import lifecycle, notices, probe, replay_jobs, reports
from shared.services import Services
from shared.watch import lookout

log = logging.getLogger(__name__)


async def route(services: Services, event: TriggerEvent, trace: str | None = None) -> DrainReport:
    """Serve one trigger event, if it names one of this app's queues. `trace`: the traceparent the event carried
    (shared.telemetry.tracing.from_event)."""
    check(services, event)
    if event.reason is Reason.REPLAY_STEP:
        return await replay_step(services, event)
    if event.reason is Reason.LOOK:
        return await look(services, event)
    if event.reason is Reason.NOTIFY:
        return await notify(services, event)
    if event.reason is Reason.PROBE:
        return await probed(services, event)
    report = await serve(services, event, trace)
    # Did a batch it recorded results of become final (two storage calls per batch, not per chunk)? The one
    # caller that stamps it final stores its completion notice (`shared.ops.notices`).
    await lifecycle.finalize_all(services, report.batches)
    if report.items_failed:
        await reports.observe_poison(services, event.queue)  # the poison alert's gauge
    return report


def check(services: Services, event: TriggerEvent) -> None:
    """Raise MalformedEvent unless the event names this app's account, one of its work queues and a slot it has."""
    if event.queue not in services.settings.partition_queues():
        raise MalformedEvent(f"event names queue {event.queue!r}, which is not one of this app's work queues")
    if event.account != services.settings.account_name:
        raise MalformedEvent(f"event names account {event.account!r}, not {services.settings.account_name!r}")
    if event.slot >= services.settings.max_drainers_per_queue:
        raise MalformedEvent(f"event asks for slot {event.slot}, beyond MAX_DRAINERS_PER_QUEUE")


async def look(services: Services, event: TriggerEvent) -> DrainReport:
    """A scheduled look of the fallback's chain (`shared.watch.lookout`)."""
    if not lookout.is_token(event.token):
        raise MalformedEvent("a look event must carry its token (32 lowercase hex digits)")
    outcome = await lookout.look(services, event)
    return DrainReport(event.queue, event.slot, event.reason.value, outcome=f"look-{outcome}")


async def notify(services: Services, event: TriggerEvent) -> DrainReport:
    """An attempt of a batch's completion notice (`shared.ops.notices`)."""
    if event.batch_id is None or not is_batch_id(event.batch_id):
        raise MalformedEvent("a notify event must name its batch (32 lowercase hex digits)")
    outcome = await notices.step(services, event.batch_id)
    return DrainReport(event.queue, event.slot, event.reason.value, outcome=outcome)


async def probed(services: Services, event: TriggerEvent) -> DrainReport:
    """The deployment's probe reached the drain function (`shared.ops.probe`)."""
    if not probe.is_probe_id(event.token):
        raise MalformedEvent("a probe event must carry its id (32 lowercase hex digits)")
    await probe.seen(services, event.token or "")
    return DrainReport(event.queue, event.slot, event.reason.value, outcome="probe-seen")


async def replay_step(services: Services, event: TriggerEvent) -> DrainReport:
    """A background replay's next step (`shared.ops.replay_jobs`)."""
    if event.job is None or not replay_jobs.is_job_id(event.job):
        raise MalformedEvent("a replay-step event must name its job (32 lowercase hex digits)")
    report = DrainReport(event.queue, event.slot, event.reason.value, outcome="replay-step")
    try:
        done = await replay_jobs.step(services, event.job)
    except NotFound:
        log.warning("replay-step event for job %s, which does not exist; ignored", event.job)
        report.outcome = "replay-job-missing"
        return report
    report.outcome = "replay-step" if done is not None else "replay-step-skipped"
    return report
