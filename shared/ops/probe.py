"""The deployment's probe: the whole path a batch takes, proven without a batch and without the chunk handler.

`POST /api/probes` sends a `probe` trigger event to Service Bus (the HTTP function's identity sends); the
Service Bus-triggered `drain` function receives it and writes `probes/<id>.json` in the state container (the
trigger fires, the drain function's identity writes to storage); `GET /api/probes?id=<id>` reads that record back,
with the work queue's depth (queue read rights). The smoke test after each deploy follows a probe instead of a
batch, so a custom handler that would refuse a made-up item never fails a deploy, and nothing of the user's
data is touched.

Cost of one probe: one Service Bus send and its delivery, one PutBlob, and per status read one GetBlob (and
one GetQueueMetadata once seen). The record stays until the state container's lifecycle rule removes it.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from shared.core.errors import NotFound, ProbeNotSent, ResourceMissing, TriggerUnavailable
from shared.core.events import Reason, TriggerEvent
from shared.services import Services
from shared.store.storage import read_json, translated, write_json

log = logging.getLogger(__name__)

PREFIX = "probes/"


def is_probe_id(text: str | None) -> bool:
    return text is not None and len(text) == 32 and all(c in "0123456789abcdef" for c in text)


def record_blob(probe_id: str) -> str:
    return f"{PREFIX}{probe_id}.json"


async def start(services: Services) -> dict[str, Any]:
    """Send a probe through Service Bus; TriggerUnavailable (503) if it cannot be sent."""
    probe_id = uuid.uuid4().hex
    queue = services.settings.partition_queues()[0]  # events name a queue; a probe's is the first partition
    event = TriggerEvent(services.settings.account_name, queue, Reason.PROBE, token=probe_id)
    try:
        await services.publisher.publish(event)
    except TriggerUnavailable as e:
        raise ProbeNotSent(f"the probe could not be sent to Service Bus: {e}") from e
    log.info("probe %s sent", probe_id)
    return {"probe_id": probe_id, "status": "sent", "status_url": f"/api/probes?id={probe_id}"}


async def seen(services: Services, probe_id: str) -> None:
    """The drain function received the probe: record it where the status route reads it."""
    state = await services.storage.ensure_container(services.settings.state_container)
    await write_json(state, record_blob(probe_id), {"probe_id": probe_id, "seen_at": time.time()})
    log.info("probe %s received by the drain function", probe_id)


async def status(services: Services, probe_id: str) -> dict[str, Any]:
    """`seen` once the drain function recorded the probe, with the work queue's depth; else `sent`."""
    if not is_probe_id(probe_id):
        raise NotFound(f"no probe {probe_id!r}")
    state = services.storage.container(services.settings.state_container)
    try:
        doc, _ = await read_json(state, record_blob(probe_id))
    except ResourceMissing:
        return {"probe_id": probe_id, "status": "sent"}
    queue = await services.storage.ensure_queue(services.settings.partition_queues()[0])
    async with translated("probe: queue depth"):
        properties = await queue.get_queue_properties()
    return {
        "probe_id": probe_id,
        "status": "seen",
        "seen_at": doc.get("seen_at"),
        "work_queue_depth": properties.approximate_message_count,
    }
