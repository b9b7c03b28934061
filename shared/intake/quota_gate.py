"""A submit's passage through its tenant's quotas (`shared.store.quotas`): checked once its batch id is claimed,
before anything of it is stored; a refused submit takes its staging manifest back, so it leaves nothing."""

from __future__ import annotations

import logging
import time

from azure.core import MatchConditions
from azure.storage.blob.aio import ContainerClient

from shared.batch.batches import Manifest
from shared.core import layout
from shared.core.errors import QuotaExceeded, StorageError
from shared.core.settings import Settings
from shared.services import Services
from shared.store import quotas
from shared.store.storage import translated

log = logging.getLogger(__name__)


def limits(settings: Settings) -> quotas.Limits:
    return quotas.Limits(settings.tenant_max_pending_items, settings.tenant_max_submits_per_min)


def check_size(settings: Settings, items: int) -> None:
    """Before anything is written: a batch larger than the pending limit is a 413."""
    quotas.check_size(items, limits(settings))


async def admit(services: Services, batches: ContainerClient, manifest: Manifest, etag: str) -> None:
    """Reserve the batch in its tenant's quota; past a limit, delete the staging manifest this submit wrote
    (over its ETag) and raise the 429. Costs nothing with no quota set."""
    settings = services.settings
    if not limits(settings).on:
        return
    state = await services.storage.ensure_container(settings.state_container)
    try:
        await quotas.reserve(state, manifest.tenant, manifest.batch_id, manifest.items, limits(settings), time.time())
    except (QuotaExceeded, StorageError):  # refused, or its use could not be written: nothing of it is kept
        await unclaim(batches, manifest, etag)
        raise


async def unclaim(batches: ContainerClient, manifest: Manifest, etag: str) -> None:
    """Delete the staging manifest of a refused submit (best effort: one left behind is judged dead after
    STAGING_TTL_S, and a retry with the same key takes it over)."""
    try:
        async with translated(f"delete the refused batch {manifest.batch_id}"):
            await batches.get_blob_client(layout.manifest_blob(manifest.batch_id)).delete_blob(
                etag=etag, match_condition=MatchConditions.IfNotModified
            )
    except StorageError as e:
        log.warning("batch %s: refused by its quota; its staging manifest stays (%s)", manifest.batch_id, e)


async def release(services: Services, manifest: Manifest) -> None:
    """The batch no longer counts as pending: it is final, or its submit failed (best effort)."""
    if limits(services.settings).on:
        state = await services.storage.ensure_container(services.settings.state_container)
        await quotas.release(state, manifest.tenant, manifest.batch_id)
