"""Read-side views: one batch's status, recent batches, and the state of every work queue (I/O around pure
aggregation)."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timezone
from typing import Any

from azure.storage.blob.aio import ContainerClient

from shared.batch.batches import Manifest, is_batch_id
from shared.batch.results import ResultEntry
from shared.core import layout
from shared.core.errors import ResourceMissing, StorageError
from shared.core.identity import Caller
from shared.core.lanes import Lane
from shared.engine import lane_queues
from shared.engine.rates import QUEUE_TARGET_PER_S, advice
from shared.ops import costs, notices, progress
from shared.ops.lifecycle import finalize, no_batch, read, visible
from shared.ops.listing import ListFilter
from shared.ops.progress import batch_progress
from shared.ops.status import FINAL, batch_status
from shared.services import Services
from shared.store import batch_index, ended, quotas
from shared.store.fallback_state import to_view
from shared.store.leases import queue_leases
from shared.store.result_store import list_counted
from shared.store.storage import read_json
from shared.telemetry import metrics
from shared.telemetry.activity import ACTIVITY
from shared.watch import lookout

log = logging.getLogger(__name__)

STARTED_AT = datetime.now(timezone.utc).isoformat()


async def read_batch_status(services: Services, batch_id: str, caller: Caller | None = None) -> dict[str, Any]:
    """Manifest (one read) plus one listing of its result blobs with their metadata (and its notice, one read);
    once, for a batch final by its records and not yet stamped, its finalize (a read, a listing, the stamp and its
    notice) and a read and a listing again. Another tenant's batch: the 404 of an unknown id, after the same read."""
    if not is_batch_id(batch_id):
        raise no_batch(batch_id)
    settings = services.settings
    try:
        doc, _ = await read_json(services.storage.container(settings.batches_container), layout.manifest_blob(batch_id))
    except ResourceMissing:
        raise no_batch(batch_id) from None
    manifest = Manifest.from_json(doc)
    visible(manifest, caller)
    entries = await list_counted(services.storage.container(settings.results_container), batch_id)
    status = batch_status(manifest, entries, datetime.now(timezone.utc))
    if status["status"] in FINAL and manifest.final_status is None:
        # Final by its records, not yet stamped: stamp it (and store its notice) first, over the manifest's ETag, so
        # that neither this answer's notice nor a cancel's end can overturn the other (lifecycle seed 601).
        await finalize(services, batch_id)
        manifest, _, entries = await read(services, batch_id)
        status = batch_status(manifest, entries, datetime.now(timezone.utc))
    if manifest.metadata:
        status["metadata"] = manifest.metadata
    if status["chunks"]["pending"]:
        # The backlog its chunks wait in: one read per partition it went to.
        names = [Lane(q, manifest.tenant, manifest.priority).name for q in manifest.queues]
        status["lane"]["depth"] = sum([await lane_queues.depth(services, name) for name in names])
    callback = await notices.for_status(services, manifest, status)  # one read, for a batch that named a callback
    if callback is not None:
        status["callback"] = callback
    return status


def status_of(manifest: Manifest, entries: list[ResultEntry]) -> str:
    return str(batch_status(manifest, entries, datetime.now(timezone.utc))["status"])


async def observe_poison(services: Services, queue: str) -> None:
    """Read a partition's poison depth into the exported gauge (`queue_drain.queue.depth`, kind=poison), which the
    poison alert watches (infra/modules/alerts.bicep): one GetQueueMetadata, after a drain execution that parked."""
    try:
        poison_depth = await lane_queues.depth(services, services.settings.poison_queue(queue))
    except StorageError as e:  # the gauge keeps its last value; the next drain that parks or a queues read mends it
        log.warning("poison depth of %s not read for the poison alert's gauge: %s", queue, e)
        return
    metrics.observe_depth(queue, poison_depth, kind="poison")


async def read_queue_status(services: Services) -> dict[str, Any]:
    settings = services.settings
    state = await services.storage.ensure_container(settings.state_container)
    now_ms = int(time.time() * 1000)
    partitions = []
    tenants: dict[str, int] = {}
    count = len(settings.partition_queues())
    for queue in settings.partition_queues():
        backoff = await services.backoff.load(queue, now_ms)
        leases = await queue_leases(state, queue, fresh_s=settings.lease_s)
        lanes = await lane_queues.depths(services, queue, state)  # a lane recorded quiet costs no read
        depth, poison_depth = sum(lanes.values()), await lane_queues.depth(services, settings.poison_queue(queue))
        for lane, n in lanes.items():
            tenants[lane.tenant] = tenants.get(lane.tenant, 0) + n
        metrics.observe_depth(queue, depth)
        metrics.observe_depth(queue, poison_depth, kind="poison")
        partitions.append(
            {
                "queue": queue,
                "depth": depth,
                "lanes": [
                    {"queue": lane.name, "tenant": lane.tenant, "priority": lane.priority, "depth": n}
                    for lane, n in sorted(lanes.items(), key=lambda pair: pair[0].name)
                ],
                "poison_depth": poison_depth,
                "active_drainers": leases.active,
                "message_rate_per_s": round(leases.rate_per_s, 1),
                "message_rate_target_per_s": QUEUE_TARGET_PER_S,
                "advice": advice(queue, leases.rate_per_s, count),
                "draining_here": sorted(slot for q, slot in services.draining if q == queue),
                "fallback_backoff": to_view(backoff, now_ms),
                "look_chain": (await lookout.read(services, queue))[0].view(now_ms),
            }
        )
    totals, reads = services.counter.totals(), services.counter.read_totals()
    return {
        "account": settings.account_name,
        "trigger_queue": settings.trigger_queue,
        "partitions": partitions,
        "tenants": [{"tenant": t, "depth": n} for t, n in sorted(tenants.items())],
        "quotas": await quota_use(services, state),
        "storage_transactions": {
            "since": STARTED_AT,
            "total": sum(totals.values()),
            "by_operation": totals,
            "reads": {"total": sum(reads.values()), "by_operation": reads},
            **costs.comparison(totals, reads, ACTIVITY.view()["total"]),
        },
    }


async def quota_use(services: Services, state: ContainerClient) -> dict[str, Any]:
    """Each tenant's quota use (one listing, when a quota is set) beside the limits."""
    settings = services.settings
    limits = {
        "max_pending_items": settings.tenant_max_pending_items,
        "max_submits_per_min": settings.tenant_max_submits_per_min,
    }
    minute = int(time.time() // 60)
    found = await quotas.every_use(state) if any(limits.values()) else []
    use = [u | {"submits_this_minute": u["submits"] if u["minute"] == minute else 0} for u in found]
    return {"limits": limits, "tenants": [{k: v for k, v in u.items() if k not in ("minute", "submits")} for u in use]}


async def read_batch_page(
    services: Services, limit: int, continuation: str | None, tenant: str | None = None, only: ListFilter | None = None
) -> dict[str, Any]:
    """Recent batches (every tenant's, or `tenant`'s own), newest first: one listing of the index, then one
    listing of the results of each batch in the filter's time (`only`; its status is judged from them, or is its
    final stamp when its index entry carries it). A batch complete by its records whose entry carries no stamp
    (not stamped yet, or its entry's stamp write failed) costs a manifest read, and once stamped a write of its
    two index blobs (`shared.store.batch_index.restamp`), so that it is read once: it may have been cancelled
    after its last record."""
    settings = services.settings
    only = only or ListFilter()
    batches = services.storage.container(settings.batches_container)
    index = await batch_index.page(batches, limit, continuation, tenant)
    entries = [entry for entry in index.entries if only.in_time(entry)]
    results = services.storage.container(settings.results_container)
    listed = await asyncio.gather(*(list_counted(results, entry.batch_id) for entry in entries))
    now = datetime.now(timezone.utc)
    shown = [batch_progress(entry, found, now) for entry, found in zip(entries, listed, strict=True)]
    unsure = [n for n, entry in enumerate(entries) if progress.unsure(entry, shown[n])]
    manifests = await asyncio.gather(*(_manifest(batches, entries[n]) for n in unsure))
    for n, manifest in zip(unsure, manifests, strict=True):
        shown[n] = batch_progress(progress.judged(entries[n], manifest), listed[n], now)
    over = any(only.past(entry) for entry in index.entries)
    return {"batches": [b for b in shown if only.keeps(b)], "continuation": None if over else index.continuation}


async def _manifest(batches: ContainerClient, entry: batch_index.IndexEntry) -> Manifest:
    """The manifest of a batch the list is unsure of; its index entry written again if it is stamped."""
    manifest, _ = await ended.read_manifest(batches, entry.batch_id)
    if manifest.final_status is not None:
        await batch_index.restamp(batches, manifest)
    return manifest
